package llmsim

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The providers' batch APIs: OpenAI's Files and Batches (a JSONL file of
// requests uploaded with purpose "batch", a batch made from it, polled
// until it is completed, its output and error files read back) and
// Anthropic's Message Batches (the requests in the create call, polled
// until processing_status is "ended", the results read as JSONL). Each
// request of a batch is answered as the same request made alone would be
// (scenario rules, faults, token counts), when the batch's processing
// delay (Config.BatchDelay) has passed since it was made: at the first
// look at it after that, so a batch needs no goroutine of its own.

// maxUpload bounds an uploaded batch file (OpenAI allows 200 MB).
const maxUpload = 200 << 20

type simFile struct {
	id, purpose, filename string
	created               int64
	data                  []byte
}

// batchLine is one request of a batch.
type batchLine struct {
	customID string
	body     []byte
}

type simBatch struct {
	mu       sync.Mutex
	id       string
	flavor   flavor
	key      string // the creator's key: its requests are made with it
	created  time.Time
	input    string // OpenAI: the input file's id
	endpoint string
	metadata map[string]string
	lines    []batchLine

	// status is OpenAI's status; Anthropic's processing_status is
	// derived (in_progress, canceling, ended).
	status       string
	errors       []map[string]any // OpenAI: why validation failed
	cancelAt     time.Time
	ended        time.Time
	output, errf string   // OpenAI: the output and error files' ids
	results      [][]byte // Anthropic: the result lines
	completed    int
	failed       int
	canceled     int
	usage        [3]int // input, output, cached tokens of the answers
}

// BatchStats counts calls to the batch APIs, by provider ("openai",
// "anthropic"): the batches created, the looks at a batch, and the
// reads of results.
type BatchStats struct {
	Created map[string]int `json:"created"`
	Polled  map[string]int `json:"polled"`
	Results map[string]int `json:"results"`
	Files   int            `json:"files"` // OpenAI files uploaded
}

type batchState struct {
	mu      sync.Mutex
	seq     int
	files   map[string]*simFile
	batches map[string]*simBatch
	stats   BatchStats
}

func (b *batchState) init() {
	if b.files == nil {
		b.files = map[string]*simFile{}
		b.batches = map[string]*simBatch{}
		b.stats = BatchStats{Created: map[string]int{}, Polled: map[string]int{}, Results: map[string]int{}}
	}
}

func (b *batchState) nextID(prefix string) string {
	b.seq++
	return fmt.Sprintf("%s%06d", prefix, b.seq)
}

func flavorName(f flavor) string {
	if f == anthropic {
		return "anthropic"
	}
	return "openai"
}

// count counts a call: "polled" or "results".
func (b *batchState) count(what string, f flavor) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.init()
	m := b.stats.Polled
	if what == "results" {
		m = b.stats.Results
	}
	m[flavorName(f)]++
}

// BatchStats returns the counts of calls to the batch APIs.
func (s *Server) BatchStats() BatchStats {
	b := &s.batch
	b.mu.Lock()
	defer b.mu.Unlock()
	b.init()
	cp := func(m map[string]int) map[string]int {
		out := make(map[string]int, len(m))
		for k, v := range m {
			out[k] = v
		}
		return out
	}
	return BatchStats{Created: cp(b.stats.Created), Polled: cp(b.stats.Polled), Results: cp(b.stats.Results), Files: b.stats.Files}
}

// PeekBatch returns a batch's status as its API would state it (OpenAI's
// status, Anthropic's processing_status), without looking at it as a
// client does (a look may run its requests); false for an unknown id.
func (s *Server) PeekBatch(id string) (string, bool) {
	b := &s.batch
	b.mu.Lock()
	b.init()
	sb := b.batches[id]
	b.mu.Unlock()
	if sb == nil {
		return "", false
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.flavor == openAI {
		return sb.status, true
	}
	switch {
	case !sb.ended.IsZero():
		return "ended", true
	case !sb.cancelAt.IsZero():
		return "canceling", true
	}
	return "in_progress", true
}

// routeBatch serves the batch APIs' paths; false when r is not for them.
func (s *Server) routeBatch(w http.ResponseWriter, r *http.Request) bool {
	p := r.URL.Path
	get, post := r.Method == http.MethodGet, r.Method == http.MethodPost
	switch {
	case post && p == "/v1/files":
		s.batchAuth(w, r, openAI, s.uploadFile)
	case get && strings.HasPrefix(p, "/v1/files/") && strings.HasSuffix(p, "/content"):
		id := strings.TrimSuffix(strings.TrimPrefix(p, "/v1/files/"), "/content")
		s.batchAuth(w, r, openAI, func(w http.ResponseWriter, r *http.Request) { s.fileContent(w, id) })
	case post && p == "/v1/batches":
		s.batchAuth(w, r, openAI, s.createOpenAIBatch)
	case strings.HasPrefix(p, "/v1/batches/"):
		id, op, _ := strings.Cut(strings.TrimPrefix(p, "/v1/batches/"), "/")
		switch {
		case get && op == "":
			s.batchAuth(w, r, openAI, func(w http.ResponseWriter, r *http.Request) { s.lookBatch(w, r, openAI, id, false) })
		case post && op == "cancel":
			s.batchAuth(w, r, openAI, func(w http.ResponseWriter, r *http.Request) { s.lookBatch(w, r, openAI, id, true) })
		default:
			return false
		}
	case post && p == "/v1/messages/batches":
		s.batchAuth(w, r, anthropic, s.createAnthropicBatch)
	case strings.HasPrefix(p, "/v1/messages/batches/"):
		id, op, _ := strings.Cut(strings.TrimPrefix(p, "/v1/messages/batches/"), "/")
		switch {
		case get && op == "":
			s.batchAuth(w, r, anthropic, func(w http.ResponseWriter, r *http.Request) { s.lookBatch(w, r, anthropic, id, false) })
		case post && op == "cancel":
			s.batchAuth(w, r, anthropic, func(w http.ResponseWriter, r *http.Request) { s.lookBatch(w, r, anthropic, id, true) })
		case get && op == "results":
			s.batchAuth(w, r, anthropic, func(w http.ResponseWriter, r *http.Request) { s.anthropicResults(w, r, id) })
		default:
			return false
		}
	case get && p == "/stats/batches":
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(s.BatchStats())
	default:
		return false
	}
	return true
}

// batchAuth checks the key as a model call of flavor f would, then serves.
func (s *Server) batchAuth(w http.ResponseWriter, r *http.Request, f flavor, h http.HandlerFunc) {
	key := apiKey(r, f)
	if len(s.cfg.Keys) > 0 && !contains(s.cfg.Keys, key) {
		if f == openAI {
			fail(w, f, 401, "invalid_request_error", "invalid_api_key", "Incorrect API key provided.")
		} else {
			fail(w, f, 401, "authentication_error", "", "invalid x-api-key")
		}
		return
	}
	h(w, r)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// uploadFile is POST /v1/files: multipart with purpose and file.
func (s *Server) uploadFile(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxUpload)
	if err := r.ParseMultipartForm(8 << 20); err != nil {
		fail(w, openAI, 400, "invalid_request_error", "", "want a multipart/form-data body with purpose and file: "+err.Error())
		return
	}
	defer func() { _ = r.MultipartForm.RemoveAll() }()
	purpose := r.FormValue("purpose")
	if purpose == "" {
		fail(w, openAI, 400, "invalid_request_error", "", "purpose: required")
		return
	}
	f, hdr, err := r.FormFile("file")
	if err != nil {
		fail(w, openAI, 400, "invalid_request_error", "", "file: required")
		return
	}
	data, err := io.ReadAll(f)
	_ = f.Close()
	if err != nil {
		fail(w, openAI, 400, "invalid_request_error", "", "file: "+err.Error())
		return
	}
	b := &s.batch
	b.mu.Lock()
	b.init()
	sf := &simFile{id: b.nextID("file-sim"), purpose: purpose, filename: hdr.Filename, created: s.now().Unix(), data: data}
	b.files[sf.id] = sf
	b.stats.Files++
	b.mu.Unlock()
	writeJSON(w, fileObject(sf))
}

func fileObject(f *simFile) map[string]any {
	return map[string]any{"id": f.id, "object": "file", "bytes": len(f.data), "created_at": f.created,
		"filename": f.filename, "purpose": f.purpose, "status": "processed"}
}

// fileContent is GET /v1/files/{id}/content.
func (s *Server) fileContent(w http.ResponseWriter, id string) {
	b := &s.batch
	b.mu.Lock()
	b.init()
	f := b.files[id]
	b.mu.Unlock()
	if f == nil {
		fail(w, openAI, 404, "invalid_request_error", "", "No such File object: "+id)
		return
	}
	if f.purpose == "batch_output" {
		b.count("results", openAI)
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	_, _ = w.Write(f.data)
}

// createOpenAIBatch is POST /v1/batches. The input file is read at once:
// a file whose lines are not all requests for the endpoint makes a
// batch that failed validation, as OpenAI's does.
func (s *Server) createOpenAIBatch(w http.ResponseWriter, r *http.Request) {
	body, err := readAll(r)
	if err != nil {
		fail(w, openAI, 400, "invalid_request_error", "", err.Error())
		return
	}
	var in struct {
		InputFileID      string            `json:"input_file_id"`
		Endpoint         string            `json:"endpoint"`
		CompletionWindow string            `json:"completion_window"`
		Metadata         map[string]string `json:"metadata"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		fail(w, openAI, 400, "invalid_request_error", "", "body is not valid JSON: "+err.Error())
		return
	}
	switch {
	case in.Endpoint != "/v1/chat/completions":
		fail(w, openAI, 400, "invalid_request_error", "", fmt.Sprintf("endpoint %q: llmsim batches take /v1/chat/completions", in.Endpoint))
		return
	case in.CompletionWindow != "24h":
		fail(w, openAI, 400, "invalid_request_error", "", "completion_window: must be 24h")
		return
	}
	b := &s.batch
	b.mu.Lock()
	b.init()
	f := b.files[in.InputFileID]
	b.mu.Unlock()
	if f == nil {
		fail(w, openAI, 400, "invalid_request_error", "", "input_file_id: no such file "+in.InputFileID)
		return
	}
	sb := &simBatch{flavor: openAI, key: apiKey(r, openAI), created: s.now(), input: f.id, endpoint: in.Endpoint,
		metadata: in.Metadata, status: "validating"}
	sb.lines, sb.errors = openAILines(f.data, in.Endpoint)
	if len(sb.errors) > 0 {
		sb.status, sb.ended = "failed", s.now()
	}
	b.mu.Lock()
	sb.id = b.nextID("batch_sim")
	b.batches[sb.id] = sb
	b.stats.Created["openai"]++
	b.mu.Unlock()
	sb.mu.Lock()
	defer sb.mu.Unlock()
	writeJSON(w, sb.openAIObject())
}

// openAILines reads a batch input file: one {custom_id, method, url,
// body} a line.
func openAILines(data []byte, endpoint string) ([]batchLine, []map[string]any) {
	var lines []batchLine
	var errs []map[string]any
	seen := map[string]bool{}
	bad := func(n int, code, msg string) {
		errs = append(errs, map[string]any{"code": code, "line": n, "message": msg, "param": nil})
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), maxBody)
	n := 0
	for sc.Scan() {
		n++
		text := bytes.TrimSpace(sc.Bytes())
		if len(text) == 0 {
			continue
		}
		var l struct {
			CustomID string          `json:"custom_id"`
			Method   string          `json:"method"`
			URL      string          `json:"url"`
			Body     json.RawMessage `json:"body"`
		}
		switch {
		case json.Unmarshal(text, &l) != nil:
			bad(n, "invalid_json_line", "This line is not parseable as valid JSON.")
		case l.CustomID == "":
			bad(n, "missing_required_parameter", "custom_id is required.")
		case seen[l.CustomID]:
			bad(n, "duplicate_custom_id", "The custom_id for this request is a duplicate of another request.")
		case l.Method != http.MethodPost:
			bad(n, "invalid_method", "method must be POST.")
		case l.URL != endpoint:
			bad(n, "mismatched_endpoint", "The provided URL does not match the batch endpoint.")
		case len(l.Body) == 0 || l.Body[0] != '{':
			bad(n, "missing_required_parameter", "body must be a JSON object.")
		default:
			seen[l.CustomID] = true
			lines = append(lines, batchLine{customID: l.CustomID, body: l.Body})
		}
	}
	if len(lines) == 0 && len(errs) == 0 {
		bad(0, "empty_file", "The input file has no requests.")
	}
	return lines, errs
}

// createAnthropicBatch is POST /v1/messages/batches.
func (s *Server) createAnthropicBatch(w http.ResponseWriter, r *http.Request) {
	body, err := readAll(r)
	if err != nil {
		fail(w, anthropic, 400, "invalid_request_error", "", err.Error())
		return
	}
	var in struct {
		Requests []struct {
			CustomID string          `json:"custom_id"`
			Params   json.RawMessage `json:"params"`
		} `json:"requests"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		fail(w, anthropic, 400, "invalid_request_error", "", "body is not valid JSON: "+err.Error())
		return
	}
	if len(in.Requests) == 0 {
		fail(w, anthropic, 400, "invalid_request_error", "", "requests: at least one request is required")
		return
	}
	sb := &simBatch{flavor: anthropic, key: apiKey(r, anthropic), created: s.now(), status: "in_progress"}
	seen := map[string]bool{}
	for i, q := range in.Requests {
		switch {
		case q.CustomID == "" || len(q.CustomID) > 64:
			fail(w, anthropic, 400, "invalid_request_error", "", fmt.Sprintf("requests.%d.custom_id: 1 to 64 characters", i))
			return
		case seen[q.CustomID]:
			fail(w, anthropic, 400, "invalid_request_error", "", fmt.Sprintf("requests.%d.custom_id: %q is not unique", i, q.CustomID))
			return
		case len(q.Params) == 0 || q.Params[0] != '{':
			fail(w, anthropic, 400, "invalid_request_error", "", fmt.Sprintf("requests.%d.params: an object is required", i))
			return
		}
		seen[q.CustomID] = true
		sb.lines = append(sb.lines, batchLine{customID: q.CustomID, body: q.Params})
	}
	b := &s.batch
	b.mu.Lock()
	b.init()
	sb.id = b.nextID("msgbatch_sim")
	b.batches[sb.id] = sb
	b.stats.Created["anthropic"]++
	b.mu.Unlock()
	sb.mu.Lock()
	defer sb.mu.Unlock()
	writeJSON(w, sb.anthropicObject(r))
}

// lookBatch is GET (and, with cancel, POST .../cancel) of a batch: it
// runs the batch's requests first when its processing delay has passed.
func (s *Server) lookBatch(w http.ResponseWriter, r *http.Request, f flavor, id string, cancel bool) {
	sb := s.findBatch(f, id)
	if sb == nil {
		if f == openAI {
			fail(w, f, 404, "invalid_request_error", "", "No batch found with id '"+id+"'.")
		} else {
			fail(w, f, 404, "not_found_error", "", "Message batch "+id+" not found.")
		}
		return
	}
	if !cancel {
		s.batch.count("polled", f)
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if cancel && sb.ended.IsZero() && sb.cancelAt.IsZero() {
		sb.cancelAt = s.now()
		if f == openAI {
			sb.status = "cancelling"
		}
	} else if !cancel {
		s.advance(r.Context(), sb)
	}
	if f == openAI {
		writeJSON(w, sb.openAIObject())
	} else {
		writeJSON(w, sb.anthropicObject(r))
	}
}

func (s *Server) findBatch(f flavor, id string) *simBatch {
	b := &s.batch
	b.mu.Lock()
	defer b.mu.Unlock()
	b.init()
	sb := b.batches[id]
	if sb == nil || sb.flavor != f {
		return nil
	}
	return sb
}

// advance moves a batch on at a look: a cancelled one ends (its requests
// not run), one whose delay has passed runs its requests and ends.
func (s *Server) advance(ctx context.Context, sb *simBatch) {
	if !sb.ended.IsZero() {
		return
	}
	now := s.now()
	switch {
	case !sb.cancelAt.IsZero():
		sb.ended, sb.status = now, "cancelled"
		sb.canceled = len(sb.lines)
		if sb.flavor == anthropic {
			for _, l := range sb.lines {
				sb.results = append(sb.results, resultLine(l.customID, map[string]any{"type": "canceled"}))
			}
		}
		return
	case now.Sub(sb.created) < s.cfg.BatchDelay:
		if sb.status == "validating" {
			sb.status = "in_progress"
		}
		return
	}
	var out, errs bytes.Buffer
	for i, l := range sb.lines {
		code, body := s.runLine(ctx, sb, l)
		var doc map[string]any
		_ = json.Unmarshal(body, &doc)
		if code == http.StatusOK {
			sb.completed++
			sb.addUsage(sb.flavor, doc)
		} else {
			sb.failed++
		}
		if sb.flavor == anthropic {
			res := map[string]any{"type": "succeeded", "message": doc}
			if code != http.StatusOK {
				res = map[string]any{"type": "errored", "error": doc}
			}
			sb.results = append(sb.results, resultLine(l.customID, res))
			continue
		}
		line, _ := json.Marshal(map[string]any{"id": fmt.Sprintf("batch_req_%s_%d", sb.id, i), "custom_id": l.customID,
			"response": map[string]any{"status_code": code, "request_id": fmt.Sprintf("req_%s_%d", sb.id, i), "body": doc},
			"error":    nil})
		if code == http.StatusOK {
			out.Write(append(line, '\n'))
		} else {
			errs.Write(append(line, '\n'))
		}
	}
	sb.ended, sb.status = s.now(), "completed"
	if sb.flavor == openAI {
		b := &s.batch
		b.mu.Lock()
		if out.Len() > 0 {
			f := &simFile{id: b.nextID("file-sim"), purpose: "batch_output", filename: "batch_" + sb.id + "_output.jsonl",
				created: sb.ended.Unix(), data: out.Bytes()}
			b.files[f.id], sb.output = f, f.id
		}
		if errs.Len() > 0 {
			f := &simFile{id: b.nextID("file-sim"), purpose: "batch_output", filename: "batch_" + sb.id + "_error.jsonl",
				created: sb.ended.Unix(), data: errs.Bytes()}
			b.files[f.id], sb.errf = f, f.id
		}
		b.mu.Unlock()
	}
}

func resultLine(customID string, result map[string]any) []byte {
	b, _ := json.Marshal(map[string]any{"custom_id": customID, "result": result})
	return b
}

// addUsage adds an answer's tokens to the batch's usage.
func (sb *simBatch) addUsage(f flavor, doc map[string]any) {
	u, _ := doc["usage"].(map[string]any)
	num := func(m map[string]any, k string) int {
		v, _ := m[k].(float64)
		return int(v)
	}
	if f == anthropic {
		sb.usage[0] += num(u, "input_tokens")
		sb.usage[1] += num(u, "output_tokens")
		sb.usage[2] += num(u, "cache_read_input_tokens")
		return
	}
	sb.usage[0] += num(u, "prompt_tokens")
	sb.usage[1] += num(u, "completion_tokens")
	d, _ := u["prompt_tokens_details"].(map[string]any)
	sb.usage[2] += num(d, "cached_tokens")
}

// lineWriter keeps the answer to one request of a batch.
type lineWriter struct {
	h    http.Header
	code int
	buf  bytes.Buffer
}

func (w *lineWriter) Header() http.Header { return w.h }
func (w *lineWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}
func (w *lineWriter) Write(p []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.buf.Write(p)
}

// lineTimeout bounds one request of a batch: a scenario's hang is a
// server error for that request, not a stuck poll.
const lineTimeout = 5 * time.Second

// runLine answers one request of a batch as the endpoint would answer
// it alone, with the batch creator's key.
func (s *Server) runLine(ctx context.Context, sb *simBatch, l batchLine) (code int, body []byte) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lineTimeout)
	defer cancel()
	path := "/v1/chat/completions"
	if sb.flavor == anthropic {
		path = "/v1/messages"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://llmsim"+path, bytes.NewReader(l.body))
	if err != nil {
		return 500, []byte(`{}`)
	}
	req.Header.Set("Content-Type", "application/json")
	if sb.flavor == anthropic {
		req.Header.Set("x-api-key", sb.key)
	} else {
		req.Header.Set("Authorization", "Bearer "+sb.key)
	}
	w := &lineWriter{h: http.Header{}}
	func() {
		// A "reset" fault hijacks the connection, which a batch's
		// request has not: it panics, and is a server error here.
		defer func() {
			if p := recover(); p != nil {
				w.code = 0
			}
		}()
		s.ServeHTTP(w, req)
	}()
	if w.code == 0 || (w.code == http.StatusOK && !json.Valid(w.buf.Bytes())) {
		return 500, errorBody(sb.flavor, "api_error", "The server had an error processing this request.")
	}
	return w.code, bytes.TrimSpace(w.buf.Bytes())
}

func errorBody(f flavor, typ, msg string) []byte {
	var b []byte
	if f == anthropic {
		b, _ = json.Marshal(map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": msg}})
	} else {
		b, _ = json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": nil}})
	}
	return b
}

func unixOrNil(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.Unix()
}

func (sb *simBatch) openAIObject() map[string]any {
	o := map[string]any{
		"id": sb.id, "object": "batch", "endpoint": sb.endpoint, "input_file_id": sb.input, "completion_window": "24h",
		"status": sb.status, "created_at": sb.created.Unix(), "expires_at": sb.created.Add(24 * time.Hour).Unix(),
		"in_progress_at": nil, "finalizing_at": nil, "completed_at": nil, "failed_at": nil, "expired_at": nil,
		"cancelling_at": unixOrNil(sb.cancelAt), "cancelled_at": nil,
		"output_file_id": nil, "error_file_id": nil, "errors": nil, "metadata": sb.metadata,
		"request_counts": map[string]any{"total": len(sb.lines), "completed": sb.completed, "failed": sb.failed},
		"usage": map[string]any{"input_tokens": sb.usage[0], "output_tokens": sb.usage[1], "total_tokens": sb.usage[0] + sb.usage[1],
			"input_tokens_details": map[string]any{"cached_tokens": sb.usage[2]}, "output_tokens_details": map[string]any{"reasoning_tokens": 0}},
	}
	if sb.status != "validating" && sb.status != "failed" {
		o["in_progress_at"] = sb.created.Unix()
	}
	switch sb.status {
	case "completed":
		o["finalizing_at"], o["completed_at"] = sb.ended.Unix(), sb.ended.Unix()
	case "failed":
		o["failed_at"] = sb.ended.Unix()
		o["errors"] = map[string]any{"object": "list", "data": sb.errors}
	case "cancelled":
		o["cancelled_at"] = sb.ended.Unix()
	}
	if sb.output != "" {
		o["output_file_id"] = sb.output
	}
	if sb.errf != "" {
		o["error_file_id"] = sb.errf
	}
	return o
}

func rfc3339OrNil(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func (sb *simBatch) anthropicObject(r *http.Request) map[string]any {
	status := "in_progress"
	switch {
	case !sb.ended.IsZero():
		status = "ended"
	case !sb.cancelAt.IsZero():
		status = "canceling"
	}
	processing := len(sb.lines) - sb.completed - sb.failed - sb.canceled
	o := map[string]any{
		"id": sb.id, "type": "message_batch", "processing_status": status,
		"request_counts": map[string]any{"processing": processing, "succeeded": sb.completed, "errored": sb.failed,
			"canceled": sb.canceled, "expired": 0},
		"created_at": rfc3339OrNil(sb.created), "expires_at": rfc3339OrNil(sb.created.Add(24 * time.Hour)),
		"ended_at": rfc3339OrNil(sb.ended), "cancel_initiated_at": rfc3339OrNil(sb.cancelAt), "archived_at": nil,
		"results_url": nil,
	}
	if status == "ended" {
		o["results_url"] = "http://" + r.Host + "/v1/messages/batches/" + sb.id + "/results"
	}
	return o
}

// anthropicResults is GET /v1/messages/batches/{id}/results: JSONL, once
// the batch has ended.
func (s *Server) anthropicResults(w http.ResponseWriter, r *http.Request, id string) {
	sb := s.findBatch(anthropic, id)
	if sb == nil {
		fail(w, anthropic, 404, "not_found_error", "", "Message batch "+id+" not found.")
		return
	}
	s.batch.count("results", anthropic)
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.ended.IsZero() {
		fail(w, anthropic, 400, "invalid_request_error", "", "Message batch "+id+" has not ended: its results are not available yet.")
		return
	}
	w.Header().Set("Content-Type", "application/x-jsonl")
	w.Header().Set("Content-Length", strconv.Itoa(lenLines(sb.results)))
	for _, l := range sb.results {
		_, _ = w.Write(append(l, '\n'))
	}
}

func lenLines(ls [][]byte) int {
	n := 0
	for _, l := range ls {
		n += len(l) + 1
	}
	return n
}
