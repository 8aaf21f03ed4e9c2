package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"mime"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	svc "github.com/svc-dev/svc"
)

// The streamed gather (POST /agents/{name}/gather):
//
//   - Accept: application/x-ndjson (or text/event-stream) answers each
//     result as it finishes, {"index": i, "result": AgentResult} a line
//     (an SSE "result" frame), then {"summary": svc.GatherSummary} (a
//     "summary" frame), whatever the body.
//   - Content-Type: application/x-ndjson takes the tasks one TaskSpec a
//     line, read as the batch goes, max_concurrency in the query; the
//     answer is then streamed too (NDJSON unless Accept asks for SSE).
//
// A streamed body has no size limit, each line has the router's body
// limit. A bad line fails its task (an AgentResult with a
// SpecValidationError naming the task and the line) and the batch goes on.

// streamFlushEvery bounds how long a written result may wait in the
// buffer while more results keep coming (they are flushed together).
const streamFlushEvery = 5 * time.Millisecond

// mediaType returns the media type of a Content-Type or Accept entry,
// lower case, without parameters.
func mediaType(v string) string {
	mt, _, err := mime.ParseMediaType(v)
	if err != nil {
		return ""
	}
	return mt
}

// streamAccept returns the streamed media type r's Accept asks for
// (svc.MediaNDJSON or svc.MediaEventStream), or "" for the JSON list:
// the first of the two that Accept lists wins.
func streamAccept(r *http.Request) string {
	for _, v := range r.Header.Values("Accept") {
		for part := range strings.SplitSeq(v, ",") {
			switch mediaType(strings.TrimSpace(part)) {
			case svc.MediaNDJSON:
				return svc.MediaNDJSON
			case svc.MediaEventStream:
				return svc.MediaEventStream
			}
		}
	}
	return ""
}

// ndjsonBody reports whether r's body is application/x-ndjson.
func ndjsonBody(r *http.Request) bool {
	return mediaType(r.Header.Get("Content-Type")) == svc.MediaNDJSON
}

// queryConcurrency reads max_concurrency from q, the query of a gather
// (the default when absent).
func queryConcurrency(q url.Values) (int, error) {
	v := q.Get("max_concurrency")
	if v == "" {
		return svc.DefaultGatherConcurrency, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, svc.Errorf(svc.KindSpecValidation, "max_concurrency %q: not an integer", truncate(v, 40))
	}
	return svc.CheckGatherConcurrency(n)
}

// gatherStreamed serves a gather whose body or answer is streamed.
func (h *handlers) gatherStreamed(w http.ResponseWriter, r *http.Request, q url.Values, name, accept string) error {
	id := headerRequestID(r)
	var tasks iter.Seq[svc.TaskSpec]
	var conc int
	var src *lineSource
	if ndjsonBody(r) {
		n, err := queryConcurrency(q)
		if err != nil {
			return err
		}
		conc = n
		src = &lineSource{body: r.Body, limit: h.maxBody}
		tasks = src.tasks
	} else {
		data, err := readBody(w, r, h.maxBody)
		if err != nil {
			return err
		}
		body, err := decodeGather(data)
		if err != nil {
			return err
		}
		tasks, conc = body.tasks(), body.maxConcurrency
	}
	if accept == "" {
		accept = svc.MediaNDJSON
	}
	gs, ok := h.b.(svc.GatherStreamer)
	if !ok {
		if src != nil {
			return svc.Errorf(svc.KindUnsupportedMediaType, "Content-Type %s: this server's backend does not stream gathers; send application/json", svc.MediaNDJSON)
		}
		gs = listStreamer{h.b}
	}
	w.Header().Set(RequestIDHeader, id)

	rc := http.NewResponseController(w)
	ctx, cancel := context.WithCancel(svc.WithRequestID(r.Context(), id))
	defer cancel()
	if src != nil {
		// The tasks are read on the runtime's feeder: once the gather is
		// over, a read still waiting for the client must end too.
		stop := context.AfterFunc(ctx, func() {
			_ = rc.SetReadDeadline(time.Unix(1, 0))
			if c, ok := r.Context().Value(connKey{}).(net.Conn); ok && r.ProtoMajor == 1 {
				_ = c.SetReadDeadline(time.Unix(1, 0))
			}
			_ = r.Body.Close()
		})
		defer stop()
	}

	sw := newStreamWriter(w, r, rc, accept, h.writeTimeout)
	// While no result comes, a keep-alive (a blank line, an SSE comment)
	// every heartbeat keeps proxies from dropping the connection, and is
	// how a client that went away is noticed: a server does not read a
	// body it is not consuming, so only a failed write tells.
	heartbeat := h.heartbeat
	if heartbeat <= 0 {
		heartbeat = DefaultHeartbeat
	}
	hbStop, hbDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(hbDone)
		t := time.NewTicker(heartbeat)
		defer t.Stop()
		for {
			select {
			case <-hbStop:
				return
			case <-t.C:
				if !sw.ping() {
					cancel() // the client is gone or does not read: stop the batch
					return
				}
			}
		}
	}()
	stopHeartbeat := sync.OnceFunc(func() { close(hbStop); <-hbDone })
	defer stopHeartbeat()

	start := time.Now()
	var sum svc.GatherSummary
	var runErr error
	for item, err := range gs.GatherStream(ctx, name, tasks, conc) {
		if err != nil {
			if sum.TaskCount == 0 {
				stopHeartbeat()
				if !sw.started {
					return err // a rejection: nothing has been written yet
				}
			}
			runErr = err
			continue
		}
		sum.Add(&item.Result)
		if !sw.result(item) {
			cancel() // the client is gone or does not read: stop the batch
			break
		}
	}
	stopHeartbeat()
	if runErr == nil && src != nil && src.err != nil {
		if e, ok := errors.AsType[*svc.Error](src.err); ok {
			runErr = e // BodyDeadline's RequestTimeoutError: no task within --read-timeout
		} else {
			runErr = svc.Wrap(svc.KindCancelled, src.err, "reading the tasks")
		}
	}
	sum.Finish(start, runErr)
	sw.summary(&sum)
	sw.end()
	return nil
}

// listStreamer streams a backend's plain Gather: one list, then its
// results in task order.
type listStreamer struct{ b svc.Backend }

func (l listStreamer) GatherStream(ctx context.Context, agent string, tasks iter.Seq[svc.TaskSpec], conc int) iter.Seq2[svc.GatherItem, error] {
	return func(yield func(svc.GatherItem, error) bool) {
		res, err := l.b.Gather(ctx, agent, slices.Collect(tasks), conc)
		if err != nil {
			yield(svc.GatherItem{}, err)
			return
		}
		for i, r := range res {
			r.Publish()
			if !yield(svc.GatherItem{Index: i, Result: r, More: i+1 < len(res)}, nil) {
				return
			}
		}
	}
}

// lineSource reads a streamed body's tasks, one TaskSpec a line. Blank
// lines are skipped; a line longer than limit, or not a valid TaskSpec,
// is a task with Invalid set. err is why reading stopped early (nil at
// the end of the body).
type lineSource struct {
	body  io.Reader
	limit int64
	err   error
}

func (s *lineSource) tasks(yield func(svc.TaskSpec) bool) {
	br := bufio.NewReaderSize(s.body, 64<<10)
	var long []byte
	index := 0
	for lineNo := 1; ; lineNo++ {
		if br.Buffered() == 0 {
			// The stream of tasks may be long; a client gets the read
			// timeout between two reads of it, not for all of it.
			renewBodyDeadline(s.body)
		}
		line, tooLong, err := readLine(br, s.limit, &long)
		if t := bytes.TrimSpace(line); len(t) > 0 || tooLong {
			var task svc.TaskSpec
			if tooLong {
				task.Invalid = svc.Errorf(svc.KindPayloadTooLarge, "task %d (line %d): longer than %d bytes", index, lineNo, s.limit)
			} else {
				task = decodeTaskLine(t, index, lineNo)
			}
			if !yield(task) {
				return
			}
			index++
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				s.err = err
			}
			return
		}
	}
}

// readLine returns the next line of br without its newline, unless it is
// longer than limit (tooLong: it was skipped). The line is valid until the
// next call; long is its buffer for lines longer than br's.
func readLine(br *bufio.Reader, limit int64, long *[]byte) (line []byte, tooLong bool, err error) {
	*long = (*long)[:0]
	for {
		frag, err := br.ReadSlice('\n')
		full := errors.Is(err, bufio.ErrBufferFull)
		if !full && len(*long) == 0 && !tooLong {
			// The common case: the whole line is in br's buffer.
			line = bytes.TrimSuffix(frag, newline)
			if int64(len(line)) > limit {
				return nil, true, err
			}
			return line, false, err
		}
		if !tooLong {
			if int64(len(*long)+len(frag)) > limit+1 {
				tooLong, *long = true, (*long)[:0]
			} else {
				*long = append(*long, frag...)
			}
		}
		if full {
			continue
		}
		if tooLong {
			return nil, true, err
		}
		line = bytes.TrimSuffix(*long, newline)
		if int64(len(line)) > limit {
			return nil, true, err
		}
		return line, false, err
	}
}

var newline = []byte("\n")

// decodeTaskLine decodes one line of a streamed body; a bad one is a task
// with Invalid set, naming the task and the line.
func decodeTaskLine(line []byte, index, lineNo int) svc.TaskSpec {
	var w wireTask
	task, err := func() (svc.TaskSpec, error) {
		if _, err := topLevelObject(line); err != nil {
			return svc.TaskSpec{}, err
		}
		if err := strictUnmarshal(line, &w); err != nil {
			return svc.TaskSpec{}, err
		}
		return w.task("")
	}()
	if err != nil {
		msg := err.Error()
		if e, ok := errors.AsType[*svc.Error](err); ok {
			msg = e.Message
		}
		// What could be read of the task still names its result.
		return svc.TaskSpec{ID: w.ID, RequestID: validOr(deref(w.RequestID)),
			Invalid: svc.Errorf(svc.KindSpecValidation, "task %d (line %d): %s", index, lineNo, msg)}
	}
	return task
}

// validOr keeps a request id only when it is a usable one.
func validOr(id string) string {
	if ValidRequestID(id) {
		return id
	}
	return ""
}

// streamWriter writes a streamed gather's answer: buffered, flushed when
// no other result is waiting (or every streamFlushEvery under load), each
// write given timeout to reach the client. The header goes with the first
// write. The handler writes the results, its heartbeat goroutine the
// keep-alives: mu orders them.
type streamWriter struct {
	w       http.ResponseWriter
	r       *http.Request
	rc      *http.ResponseController
	conn    net.Conn // from ConnContext; nil without it
	bw      *bufio.Writer
	media   string
	timeout time.Duration

	mu      sync.Mutex
	started bool      // the header is out (read by the handler once the heartbeat stopped)
	last    time.Time // of the last flush
	active  bool      // a result went out since the last heartbeat
	failed  bool
	buf     []byte
}

// deadlineWriter gives every write to the connection its deadline.
type deadlineWriter struct{ s *streamWriter }

func (d deadlineWriter) Write(p []byte) (int, error) {
	d.s.setDeadline(time.Now().Add(d.s.timeout))
	return d.s.w.Write(p)
}

func (s *streamWriter) setDeadline(t time.Time) {
	if s.conn != nil {
		_ = s.conn.SetWriteDeadline(t)
		return
	}
	_ = s.rc.SetWriteDeadline(t)
}

func newStreamWriter(w http.ResponseWriter, r *http.Request, rc *http.ResponseController, media string, timeout time.Duration) *streamWriter {
	if timeout <= 0 {
		timeout = DefaultStreamWriteTimeout
	}
	s := &streamWriter{w: w, r: r, rc: rc, media: media, timeout: timeout}
	if c, ok := r.Context().Value(connKey{}).(net.Conn); ok && r.ProtoMajor == 1 {
		s.conn = c
	}
	s.bw = bufio.NewWriterSize(deadlineWriter{s}, 32<<10)
	return s
}

// start sends the header, once; mu is held.
func (s *streamWriter) start() {
	if s.started {
		return
	}
	s.started = true
	// Read the tasks while writing the results: HTTP/1 would otherwise
	// drain the body before the first write.
	_ = s.rc.EnableFullDuplex()
	hd := s.w.Header()
	hd.Set("Content-Type", s.media)
	hd.Set("Cache-Control", "no-cache")
	hd.Set("X-Accel-Buffering", "no")
	s.w.WriteHeader(http.StatusOK)
	s.flush()
}

// ping writes a keep-alive unless a result went out since the last one;
// false once the client is gone or too slow.
func (s *streamWriter) ping() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed {
		return false
	}
	if s.active {
		s.active = false
		return true
	}
	s.start()
	if s.media == svc.MediaEventStream {
		_, _ = s.bw.WriteString(": ping\n\n")
	} else {
		_ = s.bw.WriteByte('\n')
	}
	return s.flush()
}

// result writes one result; false once the client is gone or too slow.
func (s *streamWriter) result(item svc.GatherItem) bool {
	res, err := json.Marshal(item.Result)
	if err != nil {
		// An output that is not JSON cannot happen (the runtime checks
		// it); answer the task as failed rather than break the stream.
		res, _ = json.Marshal(svc.AgentResult{AgentName: item.Result.AgentName, TaskID: item.Result.TaskID,
			Error: &svc.ErrorInfo{Type: string(svc.KindRuntime), Message: "encoding the result: " + err.Error()}})
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed {
		return false
	}
	s.start()
	s.active = true
	sse := s.media == svc.MediaEventStream
	b := s.buf[:0]
	if sse {
		b = append(b, "event: result\nid: "...)
		b = strconv.AppendInt(b, int64(item.Index), 10)
		b = append(b, "\ndata: "...)
	}
	b = append(b, `{"index":`...)
	b = strconv.AppendInt(b, int64(item.Index), 10)
	b = append(b, `,"result":`...)
	b = append(b, res...)
	b = append(b, '}', '\n')
	if sse {
		b = append(b, '\n')
	}
	s.buf = b
	if _, err := s.bw.Write(b); err != nil {
		s.failed = true
		return false
	}
	if !item.More || time.Since(s.last) >= streamFlushEvery {
		return s.flush()
	}
	return true
}

// summary writes the last line.
func (s *streamWriter) summary(sum *svc.GatherSummary) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed {
		return
	}
	s.start()
	data, err := json.Marshal(svc.StreamLine{Summary: sum})
	if err != nil {
		return
	}
	if s.media == svc.MediaEventStream {
		_, _ = fmt.Fprintf(s.bw, "event: summary\ndata: %s\n\n", data)
	} else {
		_, _ = s.bw.Write(append(data, '\n'))
	}
	s.flush()
}

// flush sends what is buffered; false once the client is gone or too
// slow. mu is held.
func (s *streamWriter) flush() bool {
	start := time.Now()
	s.last = start
	err := s.bw.Flush()
	if err == nil {
		s.setDeadline(start.Add(s.timeout))
		err = s.rc.Flush()
	}
	// A wrapper's Flush that swallows the deadline's error: the time the
	// write took tells as well.
	if err != nil || time.Since(start) >= s.timeout {
		s.failed = true
		return false
	}
	return true
}

// end clears the write deadline, or, when the client did not keep up,
// closes the connection so that it sees the cut.
func (s *streamWriter) end() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.failed {
		s.setDeadline(time.Time{})
		return
	}
	if s.conn != nil {
		if tc, ok := s.conn.(interface{ SetLinger(int) error }); ok {
			_ = tc.SetLinger(0)
		}
		_ = s.conn.Close()
	}
}
