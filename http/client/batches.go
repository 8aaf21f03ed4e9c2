package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"iter"
	"net/http"
	"net/url"
	"strconv"

	svc "github.com/svc-dev/svc"
)

var _ svc.BatchBackend = (*Client)(nil)

func batchPath(id string) string { return "/batches/" + url.PathEscape(id) }

// SubmitBatch implements svc.BatchBackend: POST /batches with the tasks as
// an application/x-ndjson body, written as tasks yields them; the server
// answers once every task is stored. A task with Invalid set is sent as a
// line the server refuses, which fails that task only. The client's
// timeout does not bound the upload; ctx does.
func (c *Client) SubmitBatch(ctx context.Context, target string, tasks iter.Seq[svc.TaskSpec], opts svc.BatchOptions) (svc.BatchAccepted, error) {
	q := url.Values{"target": {target}}
	if opts.MaxConcurrency != 0 {
		if _, err := svc.CheckGatherConcurrency(opts.MaxConcurrency); err != nil {
			return svc.BatchAccepted{}, err
		}
		q.Set("max_concurrency", strconv.Itoa(opts.MaxConcurrency))
	}
	if opts.Mode != "" {
		mode, err := svc.CheckBatchMode(opts.Mode)
		if err != nil {
			return svc.BatchAccepted{}, err
		}
		q.Set("mode", string(mode))
	}
	if opts.CallbackURL != "" {
		q.Set("callback_url", opts.CallbackURL)
	}
	if tasks == nil {
		return svc.BatchAccepted{}, svc.Wrap(svc.KindSpecValidation, svc.ErrNoTasks, "batch")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/batches?"+q.Encode(), pr)
	if err != nil {
		return svc.BatchAccepted{}, svc.Wrap(svc.KindSpecValidation, err, "client: building the request")
	}
	req.Header.Set("Content-Type", svc.MediaNDJSON)
	req.Header.Set("Accept", "application/json, application/problem+json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	written := make(chan struct{})
	go func() {
		defer close(written)
		bw := bufio.NewWriterSize(pw, 64<<10)
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		var err error
		for task := range tasks {
			buf.Reset()
			if task.Invalid != nil || enc.Encode(task) != nil {
				buf.Reset()
				buf.WriteString("null\n") // refused by the server, as this task's result
			}
			if _, err = bw.Write(buf.Bytes()); err != nil {
				break
			}
		}
		if err == nil {
			err = bw.Flush()
		}
		_ = pw.CloseWithError(err) // nil: the end of the body
	}()
	defer func() {
		cancel()
		_ = pr.CloseWithError(context.Canceled)
		<-written
	}()
	resp, err := c.hc.Do(req)
	if err != nil {
		return svc.BatchAccepted{}, transportError(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		data, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		if err != nil {
			return svc.BatchAccepted{}, transportError(err)
		}
		return svc.BatchAccepted{}, errorFromResponse(resp.StatusCode, resp.Header.Get("Content-Type"), data)
	}
	var acc svc.BatchAccepted
	if err := json.NewDecoder(resp.Body).Decode(&acc); err != nil || acc.BatchID == "" {
		return svc.BatchAccepted{}, svc.Errorf(svc.KindRuntime, "client: POST /batches: the server returned no batch_id (%v)", err)
	}
	return acc, nil
}

// BatchStatus implements svc.BatchBackend: GET /batches/{id}.
func (c *Client) BatchStatus(ctx context.Context, batchID string) (svc.BatchStatus, error) {
	var st svc.BatchStatus
	err := c.call(ctx, http.MethodGet, batchPath(batchID), "", nil, &st)
	return st, err
}

// CancelBatch implements svc.BatchBackend: POST /batches/{id}/cancel.
func (c *Client) CancelBatch(ctx context.Context, batchID string) error {
	return c.call(ctx, http.MethodPost, batchPath(batchID)+"/cancel", "", nil, nil)
}

// ListBatches implements svc.BatchBackend: GET /batches.
func (c *Client) ListBatches(ctx context.Context, cursor string, limit int) (svc.BatchPage, error) {
	q := url.Values{}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	if limit != 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	path := "/batches"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var page svc.BatchPage
	err := c.call(ctx, http.MethodGet, path, "", nil, &page)
	return page, err
}

// BatchResults implements svc.BatchBackend: GET /batches/{id}/results,
// read as the server sends it. after is the last index read (-1 for none)
// by index, the last seq (0 for none) by finish. The client's timeout does
// not bound it (a follow lasts as long as the batch); ctx does.
func (c *Client) BatchResults(ctx context.Context, batchID string, order svc.BatchOrder, after int64, follow bool) iter.Seq2[svc.BatchResult, error] {
	return func(yield func(svc.BatchResult, error) bool) {
		if order == "" {
			order = svc.BatchByIndex
		}
		q := url.Values{"order": {string(order)}}
		if after >= 0 && !(order == svc.BatchByFinish && after == 0) {
			q.Set("after", strconv.FormatInt(after, 10))
		}
		if follow {
			q.Set("follow", "true")
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+batchPath(batchID)+"/results?"+q.Encode(), nil)
		if err != nil {
			yield(svc.BatchResult{}, svc.Wrap(svc.KindSpecValidation, err, "client: building the request"))
			return
		}
		req.Header.Set("Accept", svc.MediaNDJSON+", application/problem+json")
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		resp, err := c.hc.Do(req)
		if err != nil {
			yield(svc.BatchResult{}, transportError(err))
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode < 200 || resp.StatusCode > 299 {
			data, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
			if err != nil {
				yield(svc.BatchResult{}, transportError(err))
				return
			}
			yield(svc.BatchResult{}, errorFromResponse(resp.StatusCode, resp.Header.Get("Content-Type"), data))
			return
		}
		br := bufio.NewReaderSize(resp.Body, 64<<10)
		for {
			line, err := br.ReadBytes('\n')
			if t := bytes.TrimSpace(line); len(t) > 0 {
				var l struct {
					svc.BatchResultLine
					Error *svc.ErrorInfo `json:"error"`
				}
				if jerr := json.Unmarshal(t, &l); jerr != nil {
					yield(svc.BatchResult{}, svc.Wrap(svc.KindRuntime, jerr, "client: decoding a line of batch results"))
					return
				}
				if l.Error != nil {
					yield(svc.BatchResult{}, l.Error.Err())
					return
				}
				if !yield(svc.BatchResult{Index: l.Index, Seq: l.Seq, Result: l.Result, More: br.Buffered() > 0}, nil) {
					return
				}
			}
			if err != nil {
				if !errors.Is(err, io.EOF) || ctx.Err() != nil {
					yield(svc.BatchResult{}, transportError(err))
				}
				return
			}
		}
	}
}
