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
	"sync/atomic"
	"time"

	"go.uber.org/zap"

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
//
// A half-duplex client (one that sends its whole body before it reads the
// answer: Python's requests, httpx's sync client, http.client) cannot
// take a streamed body longer than the window plus what the sockets
// buffer: the answer fills them, the server stops reading to wait for it,
// and both sides wait. The server tells it: when a write of the answer has
// waited half the write timeout while the body is still being read, it
// logs a warning, stops the batch, reads (and drops) the rest of the body
// (at most 4 GiB, for at most ten write timeouts) so that the client can
// finish sending, and then sends what it had with
// a summary whose error (BadRequestError, reason half_duplex) says to read
// while sending or to use POST /batches. No result is buffered to disk.

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

// ReasonHalfDuplex is the reason of a streamed gather's summary error when
// the client did not read the answer while it sent the tasks.
const ReasonHalfDuplex = "half_duplex"

// halfDuplexError is that error.
func halfDuplexError(read int) error {
	return &svc.Error{Kind: svc.KindBadRequest, Reason: ReasonHalfDuplex, Message: fmt.Sprintf("the client did not read the answer "+
		"while it sent the tasks (a half-duplex client): the batch stopped after %d tasks read, and the rest of the body was "+
		"dropped; read the answer while sending (a full-duplex HTTP client), or submit the tasks with POST /batches and fetch "+
		"the results from GET /batches/{id}/results", read)}
}

// halfDuplexDrainMax bounds what the server reads and drops of a
// half-duplex client's body once it stopped the batch, and
// halfDuplexDrainWrites how long, in write timeouts (100 s at the default
// 10 s): a client that sends without end, or drips, costs a bounded
// amount. Past either bound the answer is sent and the connection closed.
const (
	halfDuplexDrainMax    = 4 << 30
	halfDuplexDrainWrites = 10
)

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
	var halfDuplex atomic.Bool
	if src != nil {
		src.drain = &halfDuplex
		// The tasks are read on the runtime's feeder: once the gather is
		// over, a read still waiting for the client must end too (but
		// for a half-duplex client's, which reads the rest and drops it).
		stop := context.AfterFunc(ctx, func() {
			if halfDuplex.Load() {
				return
			}
			_ = rc.SetReadDeadline(time.Unix(1, 0))
			if c, ok := r.Context().Value(connKey{}).(net.Conn); ok && r.ProtoMajor == 1 {
				_ = c.SetReadDeadline(time.Unix(1, 0))
			}
			_ = r.Body.Close()
		})
		defer stop()
	}

	sw := newStreamWriter(w, r, rc, accept, h.writeTimeout)
	if src != nil {
		// Once the half-duplex client has sent everything, it reads: the
		// answer's writes get their timeout back.
		src.drained = func() { sw.setDeadline(time.Now().Add(sw.timeout)) }
		src.drainFor = halfDuplexDrainWrites * sw.timeout
		wdStop, wdDone := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(wdDone)
			t := time.NewTicker(sw.timeout / 8)
			defer t.Stop()
			for {
				select {
				case <-wdStop:
					return
				case <-t.C:
				}
				since := sw.blocked()
				if since < sw.timeout/2 || src.finished.Load() {
					continue
				}
				halfDuplex.Store(true)
				sw.patient.Store(true)
				// The write waits for the client to read, which it does
				// once it has sent all: no deadline until then.
				sw.setDeadline(time.Time{})
				loggerFrom(r.Context()).Warn("streamed gather: the client does not read the answer while it sends the tasks "+
					"(a half-duplex client); the batch stops, the rest of its body is read and dropped, and the answer "+
					"ends with an error telling it to read while sending or to use POST /batches",
					zap.String("agent", name), zap.Int64("tasks_read", src.read.Load()), zap.Duration("write_waited", since),
					zap.String("request_id", id))
				cancel()
				return
			}
		}()
		defer func() { close(wdStop); <-wdDone }()
	}
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
		if halfDuplex.Load() {
			break // the results that come now are the stop's
		}
		sum.Add(&item.Result)
		if !sw.result(item) {
			cancel() // the client is gone or does not read: stop the batch
			break
		}
	}
	stopHeartbeat()
	if halfDuplex.Load() {
		runErr = halfDuplexError(int(src.read.Load()))
	}
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
	// read counts the tasks yielded; finished is set once the body was
	// read to its end (or failed).
	read     atomic.Int64
	finished atomic.Bool
	// drain, when set when the reader stops taking tasks, has the rest of
	// the body read and dropped (a half-duplex client), then drained
	// called.
	drain    *atomic.Bool
	drainFor time.Duration
	drained  func()
}

func (s *lineSource) tasks(yield func(svc.TaskSpec) bool) {
	br := bufio.NewReaderSize(s.body, 64<<10)
	defer s.finished.Store(true)
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
			s.read.Add(1)
			if !yield(task) {
				s.drainRest(br)
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

// drainRest reads the rest of the body and drops it, when drain says so.
func (s *lineSource) drainRest(br *bufio.Reader) {
	if s.drain == nil || !s.drain.Load() {
		return
	}
	buf := make([]byte, 64<<10)
	until := time.Now().Add(s.drainFor)
	for n := int64(0); n < halfDuplexDrainMax && (s.drainFor <= 0 || time.Now().Before(until)); {
		renewBodyDeadline(s.body)
		k, err := br.Read(buf)
		n += int64(k)
		if err != nil {
			break
		}
	}
	if s.drained != nil {
		s.drained()
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

	// writing is when the write to the client in progress began (Unix
	// nanoseconds), 0 when none is: how long the client has not read.
	writing atomic.Int64
	// patient is set once the client is known to read only after it has
	// sent everything: a write may then wait longer than timeout.
	patient atomic.Bool

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
	now := time.Now()
	d.s.setDeadline(now.Add(d.s.timeout))
	d.s.writing.Store(now.UnixNano())
	defer d.s.writing.Store(0)
	return d.s.w.Write(p)
}

// blocked is how long the write in progress has waited, 0 without one.
func (s *streamWriter) blocked() time.Duration {
	if t := s.writing.Load(); t != 0 {
		return time.Since(time.Unix(0, t))
	}
	return 0
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
		s.writing.Store(time.Now().UnixNano())
		err = s.rc.Flush()
		s.writing.Store(0)
	}
	// A wrapper's Flush that swallows the deadline's error: the time the
	// write took tells as well.
	if err != nil || time.Since(start) >= s.timeout && !s.patient.Load() {
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
