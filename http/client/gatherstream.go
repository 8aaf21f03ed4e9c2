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
	"sync"
	"time"

	svc "github.com/svc-dev/svc"
)

// taskFlushEvery bounds how long an encoded task waits in the request's
// buffer before it is sent (tasks that come faster go out together).
const taskFlushEvery = 5 * time.Millisecond

// GatherStream implements svc.GatherStreamer: POST /agents/{name}/gather
// with the tasks as an application/x-ndjson body, written as tasks yields
// them and as the server takes them, and the results read as the server
// answers them. The client's timeout (WithTimeout) does not bound it: a
// streamed gather lasts as long as its batch; ctx does. A request id in
// ctx becomes the batch's id.
//
// A task with Invalid set is sent as a line the server refuses, and its
// result carries Invalid's message. The stream's summary line is checked,
// not yielded: a stream cut before it ends with an error, and so does one
// whose summary reports one.
func (c *Client) GatherStream(ctx context.Context, agent string, tasks iter.Seq[svc.TaskSpec], maxConcurrency int) iter.Seq2[svc.GatherItem, error] {
	return func(yield func(svc.GatherItem, error) bool) {
		if err := c.gatherStream(ctx, agent, tasks, maxConcurrency, yield); err != nil {
			yield(svc.GatherItem{}, err)
		}
	}
}

func (c *Client) gatherStream(ctx context.Context, agent string, tasks iter.Seq[svc.TaskSpec], maxConcurrency int,
	yield func(svc.GatherItem, error) bool) error {
	if _, err := svc.CheckGatherConcurrency(maxConcurrency); err != nil {
		return err
	}
	if tasks == nil {
		return svc.Wrap(svc.KindSpecValidation, svc.ErrNoTasks, "gather")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	path := "/agents/" + url.PathEscape(agent) + "/gather?max_concurrency=" + strconv.Itoa(maxConcurrency)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, pr)
	if err != nil {
		return svc.Wrap(svc.KindSpecValidation, err, "client: building the request")
	}
	req.Header.Set("Content-Type", svc.MediaNDJSON)
	req.Header.Set("Accept", svc.MediaNDJSON+", application/problem+json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if id := svc.RequestIDFrom(ctx); id != "" {
		req.Header.Set(requestIDHeader, id)
	}

	tw := &taskWriter{pw: pw}
	written := make(chan struct{})
	go func() {
		defer close(written)
		tw.run(tasks)
	}()
	defer func() {
		// Whatever ended the stream, the writer ends too: its writes
		// fail once the pipe is closed (it may first finish a task
		// tasks is producing).
		cancel()
		_ = pr.CloseWithError(context.Canceled)
		<-written
	}()

	resp, err := c.hc.Do(req)
	if err != nil {
		return transportError(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		data, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		if err != nil {
			return transportError(err)
		}
		return errorFromResponse(resp.StatusCode, resp.Header.Get("Content-Type"), data)
	}
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if t := bytes.TrimSpace(line); len(t) > 0 { // blank lines are keep-alives
			var l svc.StreamLine
			if jerr := json.Unmarshal(t, &l); jerr != nil {
				return svc.Wrap(svc.KindRuntime, jerr, "client: decoding a line of the gather stream")
			}
			switch {
			case l.Summary != nil:
				return l.Summary.Error.Err() // nil when the batch ended well
			case l.Index != nil && l.Result != nil:
				item := svc.GatherItem{Index: *l.Index, Result: *l.Result}
				if e := tw.invalid(item.Index); e != nil {
					item.Result.Error = svc.ErrorInfoOf(e)
				}
				if !yield(item, nil) {
					return nil
				}
			default:
				return svc.Errorf(svc.KindRuntime, "client: a line of the gather stream is neither a result nor the summary: %.80s", t)
			}
		}
		if err != nil {
			if ctx.Err() != nil || !errors.Is(err, io.EOF) {
				return transportError(err)
			}
			return svc.Errorf(svc.KindRuntime, "client: the gather stream ended before its summary")
		}
	}
}

// taskWriter encodes tasks into the request body, one a line, flushing
// what it holds every taskFlushEvery so a slow source's tasks do not wait
// for company.
type taskWriter struct {
	pw *io.PipeWriter

	// mu guards the buffer, which a write to the pipe may hold for as
	// long as the server does not read.
	mu    sync.Mutex
	bw    *bufio.Writer
	armed bool
	err   error

	// badMu guards bad: the tasks sent with Invalid set, by index. Not
	// mu, which the reader of the results must never wait for.
	badMu sync.Mutex
	bad   map[int]error
}

func (w *taskWriter) invalid(i int) error {
	w.badMu.Lock()
	defer w.badMu.Unlock()
	return w.bad[i]
}

func (w *taskWriter) run(tasks iter.Seq[svc.TaskSpec]) {
	w.bw = bufio.NewWriterSize(w.pw, 32<<10)
	timer := time.AfterFunc(time.Hour, w.flush)
	timer.Stop()
	i := 0
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	for task := range tasks {
		buf.Reset()
		if task.Invalid != nil {
			buf.WriteString("null\n") // refused by the server, as this task's result
		} else if err := enc.Encode(task); err != nil {
			task.Invalid = svc.Wrap(svc.KindSpecValidation, err, "client: encoding task "+strconv.Itoa(i))
			buf.Reset()
			buf.WriteString("null\n")
		}
		if task.Invalid != nil {
			w.badMu.Lock()
			if w.bad == nil {
				w.bad = map[int]error{}
			}
			w.bad[i] = task.Invalid
			w.badMu.Unlock()
		}
		w.mu.Lock()
		if w.err == nil {
			_, w.err = w.bw.Write(buf.Bytes())
		}
		if !w.armed {
			w.armed = true
			timer.Reset(taskFlushEvery)
		}
		failed := w.err != nil
		w.mu.Unlock()
		if failed {
			break
		}
		i++
	}
	timer.Stop()
	w.flush()
	w.mu.Lock()
	err := w.err
	w.mu.Unlock()
	_ = w.pw.CloseWithError(err) // nil: the end of the body
}

func (w *taskWriter) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.armed = false
	if w.err == nil {
		w.err = w.bw.Flush()
	}
}

var _ svc.GatherStreamer = (*Client)(nil)

// GatherStream implements svc.GatherStreamer over the backend's or the
// handler's streamed gather.
func (l *Local) GatherStream(ctx context.Context, agent string, tasks iter.Seq[svc.TaskSpec], maxConcurrency int) iter.Seq2[svc.GatherItem, error] {
	if gs, ok := l.b.(svc.GatherStreamer); ok {
		return gs.GatherStream(ctx, agent, tasks, maxConcurrency)
	}
	return func(yield func(svc.GatherItem, error) bool) {
		yield(svc.GatherItem{}, svc.Errorf(svc.KindRuntime, "client: the backend (%T) does not stream gathers", l.b))
	}
}

var _ svc.GatherStreamer = (*Local)(nil)
