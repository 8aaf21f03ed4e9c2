package openai

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"strings"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/model"
)

// batchModel is an "openai" model that also speaks the Batch API
// (svc.BatchModel): the calls go up as a JSONL file (POST /v1/files,
// purpose batch) of Chat Completions requests, each the body Generate
// would send; a batch is made of the file (POST /v1/batches, window
// 24h), polled (GET /v1/batches/{id}), and its output and error files
// read back (GET /v1/files/{id}/content), each line an answer by
// custom_id, read as Generate reads an answer.
type batchModel struct{ *chatModel }

var _ svc.BatchModel = (*batchModel)(nil)

// maxBatchLine bounds one line of an output file.
const maxBatchLine = 64 << 20

// batchCall is the endpoint, key and output mode a batch's calls share.
type batchCall struct {
	name string
	base string
	opts []option.RequestOption
	s    settings
}

func (m *batchModel) prepare(like *svc.ModelRequest) (*batchCall, error) {
	name := like.Model
	if name == "" {
		name = m.name
	}
	s, err := parseSettings(like.Settings)
	if err != nil {
		return nil, err
	}
	base, key, err := m.endpoint(name, &s)
	if err != nil {
		return nil, err
	}
	return &batchCall{name: name, base: base.String(), opts: m.auth(base, key), s: s}, nil
}

// SubmitCalls uploads the calls as a file and makes a batch of it.
func (m *batchModel) SubmitCalls(ctx context.Context, calls []svc.BatchCall) (string, error) {
	if len(calls) == 0 {
		return "", svc.Errorf(svc.KindSpecValidation, "openai batch: no calls")
	}
	bc, err := m.prepare(&calls[0].Request)
	if err != nil {
		return "", err
	}
	base, _ := parseBaseURL(bc.base)
	var file bytes.Buffer
	for i := range calls {
		req := &calls[i].Request
		if len(req.ServerTools) > 0 || req.OnDelta != nil {
			return "", svc.Errorf(svc.KindSpecValidation, "openai batch: call %s: server tools and streaming are not for batches", calls[i].CustomID)
		}
		body, _, err := buildParams(bc.name, req, &bc.s, isOpenAI(base))
		if err != nil {
			return "", err
		}
		raw, err := json.Marshal(body)
		if err != nil {
			return "", svc.Wrap(svc.KindSpecValidation, err, "openai batch: call "+calls[i].CustomID)
		}
		line, err := json.Marshal(struct {
			CustomID string          `json:"custom_id"`
			Method   string          `json:"method"`
			URL      string          `json:"url"`
			Body     json.RawMessage `json:"body"`
		}{calls[i].CustomID, http.MethodPost, string(sdk.BatchNewParamsEndpointV1ChatCompletions), raw})
		if err != nil {
			return "", svc.Wrap(svc.KindSpecValidation, err, "openai batch: call "+calls[i].CustomID)
		}
		file.Write(line)
		file.WriteByte('\n')
	}
	f, err := m.files.New(ctx, sdk.FileNewParams{File: sdk.File(&file, "svc-batch.jsonl", "application/jsonl"),
		Purpose: sdk.FilePurposeBatch}, bc.opts...)
	if err != nil {
		return "", callError(ctx, bc.name, err, nil)
	}
	b, err := m.batches.New(ctx, sdk.BatchNewParams{InputFileID: f.ID, Endpoint: sdk.BatchNewParamsEndpointV1ChatCompletions,
		CompletionWindow: sdk.BatchNewParamsCompletionWindow24h}, bc.opts...)
	if err != nil {
		return "", callError(ctx, bc.name, err, nil)
	}
	return b.ID, nil
}

// PollCalls reads the batch's status.
func (m *batchModel) PollCalls(ctx context.Context, id string, like *svc.ModelRequest) (svc.ProviderBatch, error) {
	bc, err := m.prepare(like)
	if err != nil {
		return svc.ProviderBatch{}, err
	}
	b, err := m.batches.Get(ctx, id, bc.opts...)
	if err != nil {
		return svc.ProviderBatch{}, callError(ctx, bc.name, err, nil)
	}
	return providerBatch(b), nil
}

func providerBatch(b *sdk.Batch) svc.ProviderBatch {
	pb := svc.ProviderBatch{ID: b.ID, Status: string(b.Status), Total: b.RequestCounts.Total,
		Succeeded: b.RequestCounts.Completed, Failed: b.RequestCounts.Failed}
	switch b.Status {
	case sdk.BatchStatusCompleted:
		pb.Ended = true
	case sdk.BatchStatusFailed:
		pb.Ended = true
		var why []string
		for _, e := range b.Errors.Data {
			w := e.Code + ": " + e.Message
			if e.Line > 0 {
				w = fmt.Sprintf("line %d: %s", e.Line, w)
			}
			why = append(why, w)
		}
		pb.Error = "the provider batch failed validation: " + strings.Join(why, "; ")
	case sdk.BatchStatusExpired:
		pb.Ended, pb.Error = true, "the provider batch expired before this call was answered"
	case sdk.BatchStatusCancelled:
		pb.Ended, pb.Error = true, "the provider batch was cancelled before this call was answered"
	}
	return pb
}

// CallAnswers reads the batch's output file, then its error file.
func (m *batchModel) CallAnswers(ctx context.Context, id string, like *svc.ModelRequest) iter.Seq2[svc.BatchAnswer, error] {
	return func(yield func(svc.BatchAnswer, error) bool) {
		bc, err := m.prepare(like)
		if err != nil {
			yield(svc.BatchAnswer{}, err)
			return
		}
		base, _ := parseBaseURL(bc.base)
		_, out, err := buildParams(bc.name, like, &bc.s, isOpenAI(base))
		if err != nil {
			yield(svc.BatchAnswer{}, err)
			return
		}
		b, err := m.batches.Get(ctx, id, bc.opts...)
		if err != nil {
			yield(svc.BatchAnswer{}, callError(ctx, bc.name, err, nil))
			return
		}
		for _, fid := range []string{b.OutputFileID, b.ErrorFileID} {
			if fid == "" {
				continue
			}
			if !m.readFile(ctx, bc, fid, out, yield) {
				return
			}
		}
	}
}

// readFile yields the answers of one output (or error) file; false when
// the reader stopped or the file could not be read.
func (m *batchModel) readFile(ctx context.Context, bc *batchCall, fid string, out outputMode, yield func(svc.BatchAnswer, error) bool) bool {
	res, err := m.files.Content(ctx, fid, bc.opts...)
	if err != nil {
		yield(svc.BatchAnswer{}, callError(ctx, bc.name, err, nil))
		return false
	}
	defer res.Body.Close()
	r := bufio.NewReaderSize(res.Body, 64<<10)
	for {
		line, err := readLine(r)
		if len(bytes.TrimSpace(line)) > 0 {
			if !yield(m.answer(bc.name, line, out)) {
				return false
			}
		}
		if errors.Is(err, io.EOF) {
			return true
		}
		if err != nil {
			yield(svc.BatchAnswer{}, &model.ProviderError{Provider: Provider, Model: bc.name, Class: model.ClassServer,
				Message: "reading the batch's file " + fid + ": " + err.Error(), Err: err})
			return false
		}
	}
}

func readLine(r *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		part, err := r.ReadSlice('\n')
		line = append(line, part...)
		if len(line) > maxBatchLine {
			return nil, fmt.Errorf("a line longer than %d bytes", maxBatchLine)
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return line, err
		}
	}
}

// answer reads one line of an output or error file.
func (m *batchModel) answer(name string, line []byte, out outputMode) (svc.BatchAnswer, error) {
	var l struct {
		CustomID string `json:"custom_id"`
		Response *struct {
			StatusCode int             `json:"status_code"`
			Body       json.RawMessage `json:"body"`
		} `json:"response"`
		Error *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(line, &l); err != nil || l.CustomID == "" {
		return svc.BatchAnswer{}, &model.ProviderError{Provider: Provider, Model: name, Class: model.ClassServer,
			Message: "malformed line in a batch's file: " + clip(string(line))}
	}
	a := svc.BatchAnswer{CustomID: l.CustomID}
	switch {
	case l.Error != nil:
		a.Err = &model.ProviderError{Provider: Provider, Model: name, Class: model.ClassServer,
			Message: strings.TrimPrefix(l.Error.Code+": "+l.Error.Message, ": ")}
	case l.Response == nil:
		a.Err = &model.ProviderError{Provider: Provider, Model: name, Class: model.ClassServer, Message: "a batch answer without a response"}
	case l.Response.StatusCode != http.StatusOK:
		var body struct {
			Error json.RawMessage `json:"error"`
		}
		_ = json.Unmarshal(l.Response.Body, &body)
		pe := &model.ProviderError{Provider: Provider, Model: name, Status: l.Response.StatusCode,
			Class: model.ClassOf(l.Response.StatusCode), Message: errorText(body.Error)}
		if pe.Message == "" {
			pe.Message = http.StatusText(pe.Status)
		}
		a.Err = pe
	default:
		a.Response, a.Err = decodeResponse(name, http.StatusOK, l.Response.Body, out)
	}
	return a, nil
}

// CancelCalls cancels the batch.
func (m *batchModel) CancelCalls(ctx context.Context, id string, like *svc.ModelRequest) error {
	bc, err := m.prepare(like)
	if err != nil {
		return err
	}
	if _, err := m.batches.Cancel(ctx, id, bc.opts...); err != nil {
		return callError(ctx, bc.name, err, nil)
	}
	return nil
}
