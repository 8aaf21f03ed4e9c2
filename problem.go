package svc

// Problem is the RFC 9457 body of every error answer of the HTTP API
// (application/problem+json): http/server writes it, http/openapi derives
// the document's Problem schema from it (and the TypeScript client's type
// from the document), so a new member is added here once. Reason is an
// extension member carrying Error.Reason when there is one.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	// Error is the kind's name, from which a client rebuilds the typed error.
	Error string `json:"error"`
	// Message repeats Detail for clients that read the spec's field name.
	Message   string `json:"message"`
	RequestID string `json:"request_id"`
	Agent     string `json:"agent,omitempty"`
	TaskID    string `json:"task_id,omitempty"`
	Reason    string `json:"reason,omitempty"`
}
