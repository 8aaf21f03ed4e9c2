package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	svc "github.com/svc-dev/svc"
)

// The batches (svc.BatchBackend), served when the backend is one or
// WithBatches gives one:
//
//	POST /batches                {"target", "tasks", "max_concurrency", "mode"} (application/json), or one
//	                             TaskSpec a line (application/x-ndjson) with ?target=&max_concurrency=&mode=
//	                             → 202 svc.BatchAccepted once every task is stored
//	GET  /batches                svc.BatchPage, newest first (?limit=&cursor=)
//	GET  /batches/{id}           svc.BatchStatus
//	GET  /batches/{id}/results   application/x-ndjson, {"index", "seq", "result"} a line
//	                             (?order=index|finish&after=N&follow=true)
//	POST /batches/{id}/cancel    204

// WithBatches serves the batch routes over bb (the batch manager of the
// process). A backend that is a svc.BatchBackend itself needs no option.
func WithBatches(bb svc.BatchBackend) Option {
	return func(c *config) error {
		if bb == nil {
			return errors.New("server: WithBatches: nil batch backend")
		}
		c.batches = bb
		return nil
	}
}

type batchHandlers struct {
	bb           svc.BatchBackend
	maxBody      int64
	writeTimeout time.Duration
	// heartbeat is how long a followed results stream stays silent
	// before an empty line (WithHeartbeat).
	heartbeat time.Duration
}

func mountBatches(r chi.Router, h *batchHandlers) {
	r.Method(http.MethodPost, "/batches", Handle(h.submit))
	r.Method(http.MethodGet, "/batches", Handle(h.list))
	r.Method(http.MethodGet, "/batches/{id}", Handle(h.status))
	r.Method(http.MethodGet, "/batches/{id}/results", Handle(h.results))
	r.Method(http.MethodPost, "/batches/{id}/cancel", Handle(h.cancel))
}

func batchID(r *http.Request) (string, error) { return pathParam(r, "id", "batch id") }

func (h *batchHandlers) submit(w http.ResponseWriter, r *http.Request) error {
	var acc svc.BatchAccepted
	if ndjsonBody(r) {
		q, err := queryOf(r, "target", "max_concurrency", "mode", "callback_url")
		if err != nil {
			return err
		}
		target := q.Get("target")
		if target == "" {
			return svc.Errorf(svc.KindSpecValidation, `query parameter "target" is required with an application/x-ndjson body (the agent's name)`)
		}
		conc, err := queryConcurrency(q)
		if err != nil {
			return err
		}
		mode, err := svc.CheckBatchMode(svc.BatchMode(truncate(q.Get("mode"), 40)))
		if err != nil {
			return err
		}
		callback, err := callbackURL(q.Get("callback_url"), q.Has("callback_url"))
		if err != nil {
			return err
		}
		src := &lineSource{body: r.Body, limit: h.maxBody}
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		tasks := func(yield func(svc.TaskSpec) bool) {
			src.tasks(yield)
			if src.err != nil {
				cancel() // the upload broke off: nothing of it is kept
			}
		}
		acc, err = h.bb.SubmitBatch(ctx, target, tasks, svc.BatchOptions{MaxConcurrency: conc, Mode: mode, CallbackURL: callback})
		if src.err != nil {
			if e, ok := errors.AsType[*svc.Error](src.err); ok {
				return e // BodyDeadline's RequestTimeoutError
			}
			return svc.Wrap(svc.KindSpecValidation, src.err, "reading the tasks")
		}
		if err != nil {
			return err
		}
	} else {
		if _, err := queryOf(r); err != nil {
			return err
		}
		data, err := readBody(w, r, h.maxBody)
		if err != nil {
			return err
		}
		body, target, opts, err := decodeBatchBody(data)
		if err != nil {
			return err
		}
		opts.MaxConcurrency = body.maxConcurrency
		acc, err = h.bb.SubmitBatch(r.Context(), target, body.tasks(), opts)
		if err != nil {
			return err
		}
	}
	w.Header().Set("Location", mountPrefix(r, "/batches")+"/batches/"+url.PathEscape(acc.BatchID))
	return writeJSON(w, http.StatusAccepted, acc)
}

// decodeBatchBody decodes and checks a JSON batch body as decodeGather
// does a gather's, and returns its target, and its mode and callback_url
// as BatchOptions.
func decodeBatchBody(data []byte) (body gatherBody, target string, opts svc.BatchOptions, err error) {
	obj, err := topLevelObject(data)
	if err != nil {
		return gatherBody{}, "", opts, err
	}
	if err := checkFieldCase(obj, reflect.TypeFor[svc.BatchRequest](), ""); err != nil {
		return gatherBody{}, "", opts, err
	}
	var wire struct {
		Target         string        `json:"target"`
		Tasks          taskList      `json:"tasks"`
		MaxConcurrency int           `json:"max_concurrency"`
		Mode           svc.BatchMode `json:"mode"`
		CallbackURL    *string       `json:"callback_url"`
	}
	if err := strictUnmarshal(data, &wire); err != nil {
		return gatherBody{}, "", opts, err
	}
	if wire.Target == "" {
		return gatherBody{}, "", opts, svc.Errorf(svc.KindSpecValidation, `"target" is required (the agent's name)`)
	}
	mode, err := svc.CheckBatchMode(svc.BatchMode(truncate(string(wire.Mode), 40)))
	if err != nil {
		return gatherBody{}, "", opts, err
	}
	if wire.Tasks.n == 0 {
		return gatherBody{}, "", opts, &svc.Error{Kind: svc.KindSpecValidation, Err: svc.ErrNoTasks}
	}
	body = gatherBody{list: wire.Tasks, n: wire.Tasks.n, maxConcurrency: wire.MaxConcurrency}
	if raw, ok := obj["max_concurrency"]; !ok || string(raw) == "null" {
		body.maxConcurrency = svc.DefaultGatherConcurrency
	} else if _, err := svc.CheckGatherConcurrency(body.maxConcurrency); err != nil {
		return gatherBody{}, "", opts, err
	}
	callback, err := callbackURL(deref(wire.CallbackURL), wire.CallbackURL != nil)
	if err != nil {
		return gatherBody{}, "", opts, err
	}
	return body, wire.Target, svc.BatchOptions{Mode: mode, CallbackURL: callback}, nil
}

// callbackURL refuses a callback_url given empty; what else a URL must be
// the backend checks (svc.Callbacks.CheckCallback).
func callbackURL(v string, given bool) (string, error) {
	if given && v == "" {
		return "", svc.Errorf(svc.KindSpecValidation, "callback_url is empty: give a URL or leave it out")
	}
	return v, nil
}

func (h *batchHandlers) list(w http.ResponseWriter, r *http.Request) error {
	q, err := queryOf(r, "limit", "cursor")
	if err != nil {
		return err
	}
	limit := 0
	if v := q.Get("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil || limit < 1 || limit > svc.MaxBatchPage {
			return svc.Errorf(svc.KindSpecValidation, "limit %q: want 1..%d", truncate(v, 40), svc.MaxBatchPage)
		}
	}
	page, err := h.bb.ListBatches(r.Context(), q.Get("cursor"), limit)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, page)
}

func (h *batchHandlers) status(w http.ResponseWriter, r *http.Request) error {
	id, err := batchID(r)
	if err != nil {
		return err
	}
	st, err := h.bb.BatchStatus(r.Context(), id)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, st)
}

func (h *batchHandlers) cancel(w http.ResponseWriter, r *http.Request) error {
	id, err := batchID(r)
	if err != nil {
		return err
	}
	if err := optionalJSONBody(r); err != nil {
		return err
	}
	if err := h.bb.CancelBatch(r.Context(), id); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// batchResultsQuery reads the query of GET /batches/{id}/results.
func batchResultsQuery(r *http.Request) (order svc.BatchOrder, after int64, follow bool, err error) {
	q, err := queryOf(r, "order", "after", "follow")
	if err != nil {
		return "", 0, false, err
	}
	order = svc.BatchOrder(q.Get("order"))
	switch order {
	case "":
		order = svc.BatchByIndex
	case svc.BatchByIndex, svc.BatchByFinish:
	default:
		return "", 0, false, svc.Errorf(svc.KindSpecValidation, "order %q: want index or finish", truncate(string(order), 40))
	}
	after = -1
	if order == svc.BatchByFinish {
		after = 0
	}
	if v := q.Get("after"); v != "" {
		n, perr := strconv.ParseInt(v, 10, 64)
		if perr != nil || n < 0 {
			return "", 0, false, svc.Errorf(svc.KindSpecValidation, "after %q: want a non-negative integer (the last index, or seq, read)", truncate(v, 40))
		}
		after = n
	}
	switch v := q.Get("follow"); v {
	case "true", "1":
		follow = true
	case "", "false", "0":
	default:
		return "", 0, false, svc.Errorf(svc.KindSpecValidation, "follow %q: want true or false", truncate(v, 40))
	}
	return order, after, follow, nil
}

// batchErrorLine ends a results stream that broke after its first line.
type batchErrorLine struct {
	Error *svc.ErrorInfo `json:"error"`
}

func (h *batchHandlers) results(w http.ResponseWriter, r *http.Request) error {
	id, err := batchID(r)
	if err != nil {
		return err
	}
	order, after, follow, err := batchResultsQuery(r)
	if err != nil {
		return err
	}
	// The batch must exist before the 200 goes out.
	if _, err := h.bb.BatchStatus(r.Context(), id); err != nil {
		return err
	}
	rc := http.NewResponseController(w)
	timeout := h.writeTimeout
	if timeout <= 0 {
		timeout = DefaultStreamWriteTimeout
	}
	hd := w.Header()
	hd.Set("Content-Type", svc.MediaNDJSON)
	hd.Set("Cache-Control", "no-cache")
	hd.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriterSize(w, 32<<10)
	flush := func() bool {
		_ = rc.SetWriteDeadline(time.Now().Add(timeout))
		if bw.Flush() != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !flush() {
		return nil
	}
	// The results are read on a goroutine of their own, so that a follow
	// that waits for results sends an empty line every heartbeat (proxies
	// drop idle connections; clients skip blank lines).
	type next struct {
		res svc.BatchResult
		err error
	}
	ctx, cancel := context.WithCancel(r.Context())
	items := make(chan next)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(items)
		for res, err := range h.bb.BatchResults(ctx, id, order, after, follow) {
			select {
			case items <- next{res, err}:
			case <-ctx.Done():
				return
			}
		}
	}()
	defer func() { cancel(); <-done }()
	heartbeat := h.heartbeat
	if heartbeat <= 0 {
		heartbeat = DefaultHeartbeat
	}
	idle := time.NewTimer(heartbeat)
	defer idle.Stop()
	var line []byte
	for {
		var it next
		var ok bool
		select {
		case it, ok = <-items:
		case <-idle.C:
			_ = bw.WriteByte('\n')
			if !flush() {
				return nil
			}
			idle.Reset(heartbeat)
			continue
		}
		if !ok {
			break
		}
		idle.Reset(heartbeat)
		res, err := it.res, it.err
		if err != nil {
			if r.Context().Err() != nil {
				return nil
			}
			b, _ := json.Marshal(batchErrorLine{Error: svc.ErrorInfoOf(err)})
			_, _ = bw.Write(append(b, '\n'))
			break
		}
		line = line[:0]
		line = append(line, `{"index":`...)
		line = strconv.AppendInt(line, res.Index, 10)
		line = append(line, `,"seq":`...)
		line = strconv.AppendInt(line, res.Seq, 10)
		line = append(line, `,"result":`...)
		line = append(line, res.Result...)
		line = append(line, '}', '\n')
		if _, err := bw.Write(line); err != nil {
			return nil
		}
		if !res.More && !flush() {
			return nil // the client is gone or too slow
		}
	}
	flush()
	_ = rc.SetWriteDeadline(time.Time{})
	return nil
}
