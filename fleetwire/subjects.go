package fleetwire

import "strings"

// Wire subjects of the distributed mode (docs/distributed.md).
const (
	// SubjectWorkers (broadcast) carries worker_started, worker_heartbeat
	// and worker_stopped RuntimeEvents, seen by every serve node.
	SubjectWorkers = "svc.workers"
	// SubjectWorkersPing (broadcast) asks every worker for a
	// worker_heartbeat now: a serve node that starts sends it, so it
	// knows the fleet at once rather than at the next heartbeat.
	SubjectWorkersPing = "svc.workers.ping"
	// SubjectCancel (broadcast) carries cancel envelopes: every process
	// cancels what it runs of that run_id.
	SubjectCancel = "svc.cancel"

	subjectTasks   = "svc.tasks."
	subjectResults = "svc.results."
	subjectEvents  = "svc.events."
	subjectDead    = "svc.dead."
)

// TaskSubject is the work subject of an agent's tasks: "svc.tasks.{agent}",
// one consumer group per agent shared by the fleet.
func TaskSubject(agent string) string { return subjectTasks + agent }

// ResultSubject is a publisher's inbox, "svc.results.{runtime_id}": a work
// subject its one process consumes, correlated by task_id.
func ResultSubject(runtimeID string) string { return subjectResults + runtimeID }

// EventSubject is the broadcast subject, "svc.events.{runtime_id}", on which
// workers relay the RuntimeEvents of that publisher's tasks when it runs with
// --publish-events.
func EventSubject(runtimeID string) string { return subjectEvents + runtimeID }

// DeadLetterSubject is the work subject that receives DeadLetter records of
// subject: "svc.tasks.triage" → "svc.dead.tasks.triage".
func DeadLetterSubject(subject string) string {
	return subjectDead + strings.TrimPrefix(subject, "svc.")
}

// CancelledRunKey is the svc.Retainer key that records a cancelled run.
func CancelledRunKey(runID string) string { return "cancelled.run." + runID }
