package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"time"

	"github.com/svc-dev/svc"
)

var _ svc.WebhookStore = (*Store)(nil)

// webhookSchema holds the callbacks (svc.WebhookStore): a new table, which
// an older build never reads, so no new schema version. A delivery is its
// JSON; due, its NextAt in Unix microseconds while it is not terminal
// (NULL after), is what a claim looks up.
const webhookSchema = `
CREATE TABLE IF NOT EXISTS webhooks (
	id   TEXT PRIMARY KEY,
	due  INTEGER,
	data BLOB NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS webhooks_due ON webhooks (due, id) WHERE due IS NOT NULL;
`

func encodeDelivery(d *svc.WebhookDelivery) (data []byte, due any, err error) {
	if err := svc.CheckWebhook(d); err != nil {
		return nil, nil, err
	}
	data, err = json.Marshal(d)
	if err != nil {
		return nil, nil, svc.Wrap(svc.KindSpecValidation, err, "webhook "+d.ID)
	}
	if d.State.Terminal() {
		return data, nil, nil
	}
	return data, micros(d.NextAt), nil
}

func decodeDelivery(id string, data []byte) (svc.WebhookDelivery, error) {
	var d svc.WebhookDelivery
	if err := json.Unmarshal(data, &d); err != nil {
		return d, svc.Wrap(svc.KindRuntime, err, "sqlitestore: webhook "+id+": corrupt")
	}
	return d, nil
}

// CreateWebhook stores a delivery; see svc.WebhookStore.
func (s *Store) CreateWebhook(ctx context.Context, d svc.WebhookDelivery) error {
	if err := s.check(); err != nil {
		return err
	}
	data, due, err := encodeDelivery(&d)
	if err != nil {
		return err
	}
	res, err := s.writer.ExecContext(ctx, `INSERT OR IGNORE INTO webhooks (id, due, data) VALUES (?1, ?2, ?3)`, d.ID, due, data)
	if err != nil {
		return s.fail(ctx, err, "webhook %q: create", d.ID)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return svc.Errorf(svc.KindRunState, "webhook %q exists", d.ID)
	}
	return nil
}

// GetWebhook returns a delivery; see svc.WebhookStore.
func (s *Store) GetWebhook(ctx context.Context, id string) (svc.WebhookDelivery, error) {
	if err := s.check(); err != nil {
		return svc.WebhookDelivery{}, err
	}
	var data []byte
	err := s.reader.QueryRowContext(ctx, `SELECT data FROM webhooks WHERE id = ?1`, id).Scan(&data)
	if errors.Is(err, sql.ErrNoRows) {
		return svc.WebhookDelivery{}, svc.UnknownWebhook(id)
	}
	if err != nil {
		return svc.WebhookDelivery{}, s.fail(ctx, err, "webhook %q: read", id)
	}
	return decodeDelivery(id, data)
}

// UpdateWebhook replaces a delivery; see svc.WebhookStore.
func (s *Store) UpdateWebhook(ctx context.Context, d svc.WebhookDelivery) error {
	if err := s.check(); err != nil {
		return err
	}
	data, due, err := encodeDelivery(&d)
	if err != nil {
		return err
	}
	// Only a row not yet terminal (due set) is replaced; when none is,
	// the row is read to say why.
	res, err := s.writer.ExecContext(ctx, `UPDATE webhooks SET due = ?2, data = ?3 WHERE id = ?1 AND due IS NOT NULL`, d.ID, due, data)
	if err != nil {
		return s.fail(ctx, err, "webhook %q: update", d.ID)
	}
	if n, _ := res.RowsAffected(); n > 0 {
		return nil
	}
	old, err := s.GetWebhook(ctx, d.ID)
	if err != nil {
		return err
	}
	return svc.WebhookEnded(d.ID, old.State)
}

// ClaimWebhooks claims due deliveries in one transaction; see
// svc.WebhookStore.
func (s *Store) ClaimWebhooks(ctx context.Context, now time.Time, lease time.Duration, limit int) ([]svc.WebhookDelivery, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, svc.Errorf(svc.KindSpecValidation, "claim webhooks: limit %d: want at least 1", limit)
	}
	fail := func(err error) ([]svc.WebhookDelivery, error) { return nil, s.fail(ctx, err, "claim webhooks") }
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return fail(err)
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, `SELECT id, data FROM webhooks WHERE due IS NOT NULL AND due <= ?1 ORDER BY due, id LIMIT ?2`,
		micros(now), limit)
	if err != nil {
		return fail(err)
	}
	var out []svc.WebhookDelivery
	for rows.Next() {
		var id string
		var data []byte
		if err := rows.Scan(&id, &data); err != nil {
			rows.Close()
			return fail(err)
		}
		d, err := decodeDelivery(id, data)
		if err != nil {
			rows.Close()
			return nil, err
		}
		out = append(out, d)
	}
	if err := rows.Close(); err != nil {
		return fail(err)
	}
	if err := rows.Err(); err != nil {
		return fail(err)
	}
	next := now.Add(lease)
	for i := range out {
		out[i].NextAt = next
		data, due, err := encodeDelivery(&out[i])
		if err != nil {
			return nil, err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE webhooks SET due = ?2, data = ?3 WHERE id = ?1`, out[i].ID, due, data); err != nil {
			return fail(err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fail(err)
	}
	return out, nil
}
