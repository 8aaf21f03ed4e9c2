package batch

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/agent"
)

// A batch of mode provider makes its tasks' model calls through the
// provider's batch API (svc.BatchModel) instead of the runtime: the tasks
// go up in parts of Config.ProviderPart, one provider batch each, whose
// ids are stored with the batch (BatchStore.SetBatchProvider) as soon as
// the provider gives them, so that a process that resumes the batch
// polls those provider batches instead of submitting the tasks again.
// Each part is polled every Config.ProviderPoll until the provider says
// it ended; its answers, read by custom_id (the task's index), become
// the tasks' results, at the batch price. A task the provider did not
// answer (its batch expired or was cancelled, or failed validation)
// fails with the provider's reason.

// providerState is what a batch of mode provider keeps in its record's
// Provider value.
type providerState struct {
	// Parts are the provider batches submitted, in task order: each holds
	// the tasks [First, First+N) whose results were not stored when it
	// was made.
	Parts []providerPart `json:"parts"`
}

type providerPart struct {
	ID        string    `json:"id"`
	First     int64     `json:"first"`
	N         int64     `json:"n"`
	Submitted time.Time `json:"submitted"`
	// Done is set once its answers are all stored.
	Done bool `json:"done,omitempty"`
}

// BackendProviderBatch is the backend of a result a provider batch
// answered (ResultMetadata.Backend).
const BackendProviderBatch = "provider_batch"

// maxProviderFailures is how many calls to the provider's batch API in a
// row may fail (each tried again a ProviderPoll later) before the batch
// fails with the last error.
const maxProviderFailures = 10

type providerRun struct {
	r     *runner
	one   *agent.OneCall
	like  svc.ModelRequest
	st    providerState
	fails int
}

func (r *runner) runProvider(ctx context.Context) {
	p := &providerRun{r: r}
	err := p.run(ctx)
	switch {
	case ctx.Err() != nil:
		p.stopped()
	case err == nil:
		r.end(svc.BatchCompleted, "")
	case svc.KindOf(err) == svc.KindRunState:
		// Ended elsewhere (cancelled).
	default:
		r.end(svc.BatchFailed, err.Error())
	}
}

// stopped runs when the batch's context ended: a cancelled batch cancels
// its provider batches still open; a process that stops leaves them to
// the process that resumes the batch.
func (p *providerRun) stopped() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rec, err := p.r.m.cfg.Store.GetBatch(ctx, p.r.rec.BatchID)
	if err != nil || rec.State != svc.BatchCancelled || p.one == nil {
		return
	}
	for _, part := range p.st.Parts {
		if part.Done {
			continue
		}
		if err := p.one.Model.CancelCalls(ctx, part.ID, &p.like); err != nil {
			p.r.log().Warn("cancelling a provider batch of a cancelled batch failed", zap.String("provider_batch", part.ID), zap.Error(err))
		}
	}
}

func (p *providerRun) run(ctx context.Context) error {
	r := p.r
	oc, ok := r.m.cfg.Runner.(OneCaller)
	if !ok {
		return svc.Errorf(svc.KindSpecValidation, "this server cannot run batches of mode provider")
	}
	one, err := oc.OneCall(ctx, r.rec.Target)
	if err != nil {
		return err // the agent changed since the batch was made
	}
	p.one, p.like = one, one.Like()
	if len(r.rec.Provider) > 0 {
		if err := json.Unmarshal(r.rec.Provider, &p.st); err != nil {
			return svc.Wrap(svc.KindRuntime, err, "batch: its stored provider batches are corrupt")
		}
	}
	next := int64(0)
	if n := len(p.st.Parts); n > 0 {
		next = p.st.Parts[n-1].First + p.st.Parts[n-1].N
	}
	part := int64(r.m.cfg.ProviderPart)
	for total := r.rec.Counts.Total; next < total; {
		n := min(part, total-next)
		if err := p.submit(ctx, next, n); err != nil {
			return err
		}
		next += n
	}
	for {
		open := false
		for i := range p.st.Parts {
			if p.st.Parts[i].Done {
				continue
			}
			open = true
			if err := p.poll(ctx, &p.st.Parts[i]); err != nil {
				return err
			}
		}
		if !open {
			return nil
		}
		if !p.wait(ctx) {
			return ctx.Err()
		}
	}
}

func (p *providerRun) wait(ctx context.Context) bool {
	t := time.NewTimer(p.r.m.cfg.ProviderPoll)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// failed counts a failed call to the provider: an error once there were
// maxProviderFailures in a row.
func (p *providerRun) failed(what string, err error) error {
	p.fails++
	if p.fails >= maxProviderFailures {
		return svc.Wrap(svc.KindModel, err, fmt.Sprintf("batch: %s failed %d times in a row", what, p.fails))
	}
	p.r.log().Warn("a call to the provider's batch API failed; trying again", zap.String("call", what), zap.Int("failures", p.fails), zap.Error(err))
	return nil
}

// tasks reads the tasks [first, first+n).
func (p *providerRun) tasks(ctx context.Context, first, n int64) ([]svc.TaskSpec, error) {
	st := p.r.m.cfg.Store
	out := make([]svc.TaskSpec, 0, n)
	for c := first / svc.BatchChunkSize; c*svc.BatchChunkSize < first+n; c++ {
		chunk, err := st.BatchChunk(ctx, p.r.rec.BatchID, int(c))
		if err != nil {
			return nil, err
		}
		for j, raw := range chunk {
			if idx := c*svc.BatchChunkSize + int64(j); idx >= first && idx < first+n {
				out = append(out, decodeTask(raw))
			}
		}
	}
	return out, nil
}

// stored reports which of the tasks [first, first+n) have a result.
func (p *providerRun) stored(ctx context.Context, first, n int64) ([]bool, error) {
	done := make([]bool, n)
	after := first - 1
	for {
		res, err := p.r.m.cfg.Store.BatchResults(ctx, p.r.rec.BatchID, svc.BatchByIndex, after, resultPage)
		if err != nil {
			return nil, err
		}
		for _, x := range res {
			if x.Index >= first+n {
				return done, nil
			}
			done[x.Index-first] = true
			after = x.Index
		}
		if len(res) < resultPage {
			return done, nil
		}
	}
}

func (p *providerRun) taskID(t *svc.TaskSpec, idx int64) string {
	if t.ID != "" {
		return t.ID
	}
	return p.r.rec.BatchID + "-" + strconv.FormatInt(idx, 10)
}

// submit sends the tasks [first, first+n) that have no result as one
// provider batch, storing at once the results of the tasks that fail
// before any call (an invalid line, an input the agent refuses).
func (p *providerRun) submit(ctx context.Context, first, n int64) error {
	tasks, err := p.tasks(ctx, first, n)
	if err != nil {
		return err
	}
	done, err := p.stored(ctx, first, n)
	if err != nil {
		return err
	}
	var calls []svc.BatchCall
	var failed []svc.BatchResult
	for i := range tasks {
		t, idx := &tasks[i], first+int64(i)
		if done[i] {
			continue
		}
		err := t.Invalid
		var req svc.ModelRequest
		if err == nil {
			req, err = p.one.Request(ctx, t.Input)
		}
		if err != nil {
			failed = append(failed, p.result(p.taskID(t, idx), idx, nil, err, time.Now()))
			continue
		}
		calls = append(calls, svc.BatchCall{CustomID: strconv.FormatInt(idx, 10), Request: req})
	}
	if err := p.store(failed, 0); err != nil {
		return err
	}
	if len(calls) == 0 {
		return nil
	}
	for {
		id, err := p.one.Model.SubmitCalls(ctx, calls)
		if err == nil {
			p.fails = 0
			p.st.Parts = append(p.st.Parts, providerPart{ID: id, First: first, N: n, Submitted: time.Now().UTC()})
			p.r.log().Info("provider batch submitted", zap.String("provider_batch", id), zap.Int64("first", first), zap.Int("calls", len(calls)))
			if err := p.save(); err != nil {
				return err
			}
			// No result yet: the status counts the tasks at the provider
			// as running.
			return p.setRunning()
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if ferr := p.failed("submitting to the provider's batch API", err); ferr != nil {
			return ferr
		}
		if !p.wait(ctx) {
			return ctx.Err()
		}
	}
}

// save stores the provider batches, so a resume polls them.
func (p *providerRun) save() error {
	data, err := json.Marshal(p.st)
	if err != nil {
		return svc.Wrap(svc.KindRuntime, err, "batch: encoding its provider batches")
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(p.r.m.ctx), 10*time.Second)
	defer cancel()
	return p.r.m.cfg.Store.SetBatchProvider(ctx, p.r.rec.BatchID, data)
}

// setRunning stores running() as the batch's tasks in flight.
func (p *providerRun) setRunning() error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(p.r.m.ctx), 10*time.Second)
	defer cancel()
	_, err := p.r.m.cfg.Store.AddBatchResults(ctx, p.r.rec.BatchID, p.running(), nil)
	return err
}

// running is how many tasks the open provider batches hold.
func (p *providerRun) running() int64 {
	var n int64
	for _, part := range p.st.Parts {
		if !part.Done {
			n += part.N
		}
	}
	return n
}

// store writes results, in groups of flushSize, even when ctx has ended
// (they are done: a resume must not ask for them again).
func (p *providerRun) store(results []svc.BatchResult, running int64) error {
	for len(results) > 0 {
		n := min(len(results), flushSize)
		ctx, cancel := context.WithTimeout(context.WithoutCancel(p.r.m.ctx), 10*time.Second)
		_, err := p.r.m.cfg.Store.AddBatchResults(ctx, p.r.rec.BatchID, running, results[:n])
		cancel()
		if err != nil {
			return err
		}
		results = results[n:]
	}
	return nil
}

// poll asks about one open provider batch and, once it has ended, stores
// its answers.
func (p *providerRun) poll(ctx context.Context, part *providerPart) error {
	pb, err := p.one.Model.PollCalls(ctx, part.ID, &p.like)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return p.failed("polling provider batch "+part.ID, err)
	}
	p.fails = 0
	if !pb.Ended {
		return nil
	}
	tasks, err := p.tasks(ctx, part.First, part.N)
	if err != nil {
		return err
	}
	answered := make([]bool, part.N)
	var buf []svc.BatchResult
	running := p.running()
	for a, err := range p.one.Model.CallAnswers(ctx, part.ID, &p.like) {
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			// The answers read so far are stored; the rest are read again
			// at the next poll (a result stored twice keeps the first).
			if serr := p.store(buf, running); serr != nil {
				return serr
			}
			return p.failed("reading the answers of provider batch "+part.ID, err)
		}
		idx, perr := strconv.ParseInt(a.CustomID, 10, 64)
		if perr != nil || idx < part.First || idx >= part.First+part.N {
			p.r.log().Warn("a provider batch answered a call it was not given", zap.String("provider_batch", part.ID), zap.String("custom_id", a.CustomID))
			continue
		}
		i := idx - part.First
		answered[i] = true
		var resp *svc.ModelResponse
		if a.Err == nil {
			resp = &a.Response
		} else {
			err = svc.Wrap(svc.KindModel, a.Err, "model "+p.one.ModelID)
		}
		buf = append(buf, p.result(p.taskID(&tasks[i], idx), idx, resp, err, part.Submitted))
		if len(buf) >= flushSize {
			if err := p.store(buf, running); err != nil {
				return err
			}
			buf = buf[:0]
		}
	}
	why := pb.Error
	if why == "" {
		why = "the provider batch ended without an answer to this call"
	}
	for i, ok := range answered {
		if !ok {
			// Tasks that failed before the call have their result already;
			// the store keeps that one.
			idx := part.First + int64(i)
			buf = append(buf, p.result(p.taskID(&tasks[i], idx), idx, nil,
				svc.Errorf(svc.KindModel, "model %s: %s (provider batch %s, %s)", p.one.ModelID, why, part.ID, pb.Status), part.Submitted))
		}
	}
	part.Done = true
	if err := p.store(buf, p.running()); err != nil {
		return err
	}
	return p.save()
}

// result is a task's stored result: the run's output from resp, or its
// failure err.
func (p *providerRun) result(taskID string, idx int64, resp *svc.ModelResponse, err error, since time.Time) svc.BatchResult {
	res := svc.AgentResult{AgentName: p.one.Agent(), TaskID: taskID, Metadata: svc.ResultMetadata{
		TraceID: p.r.rec.BatchID, Attempts: 1, Backend: BackendProviderBatch,
		DurationMS: float64(time.Since(since).Microseconds()) / 1000}}
	if resp != nil {
		res.Metadata.Model = p.one.ModelID
		res.Metadata.TokensUsed = resp.Tokens()
		res.Metadata.CachedTokens = resp.CachedInputTokens
		cost, known := p.one.Cost(resp)
		res.Metadata.CostUSD, res.Metadata.CostUnknown = cost, !known
		var out json.RawMessage
		if out, err = p.one.Output(context.WithoutCancel(p.r.m.ctx), resp); err == nil {
			res.Output, res.Success = out, true
		}
	}
	if err != nil {
		res.Output = json.RawMessage("null")
		res.Error = svc.ErrorInfoOf(err)
	}
	data, merr := json.Marshal(res)
	if merr != nil {
		data, _ = json.Marshal(svc.AgentResult{AgentName: res.AgentName, TaskID: taskID, Output: json.RawMessage("null"),
			Error: &svc.ErrorInfo{Type: string(svc.KindRuntime), Message: "encoding the result: " + merr.Error()}})
		res.Success = false
	}
	return svc.BatchResult{Index: idx, Result: data, Success: res.Success, Tokens: res.Metadata.TokensUsed, Cost: res.Metadata.CostUSD}
}
