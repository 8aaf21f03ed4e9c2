package client

import (
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"strings"
	"unicode"

	svc "github.com/svc-dev/svc"
)

// problem is the part of an RFC 9457 body (as written by http/server) the
// client reads.
type problem struct {
	Title   string `json:"title"`
	Detail  string `json:"detail"`
	Error   string `json:"error"`
	Message string `json:"message"`
	Agent   string `json:"agent"`
	TaskID  string `json:"task_id"`
	Reason  string `json:"reason"`
}

// errorFromResponse rebuilds the error of a non-2xx response. A problem
// naming a kind becomes an *svc.Error of that kind (one this build does not
// know keeps its name and still matches svc.ErrRuntime); anything else, a
// proxy's HTML page say, becomes an AgentRuntimeError quoting the status
// and the start of the body.
func errorFromResponse(status int, contentType string, body []byte) error {
	if isJSON(contentType) {
		var p problem
		if err := json.Unmarshal(body, &p); err == nil {
			msg := firstNonEmpty(p.Detail, p.Message, p.Title)
			if validKindName(p.Error) {
				if msg == "" {
					msg = fmt.Sprintf("HTTP %d %s", status, http.StatusText(status))
				}
				return &svc.Error{Kind: svc.Kind(p.Error), Message: msg, Agent: p.Agent, TaskID: p.TaskID, Reason: p.Reason}
			}
			if msg != "" {
				return svc.Errorf(svc.KindRuntime, "HTTP %d %s: %s", status, http.StatusText(status), quote(msg))
			}
		}
	}
	if snippet := quote(string(body)); snippet != "" {
		return svc.Errorf(svc.KindRuntime, "HTTP %d %s: %s", status, http.StatusText(status), snippet)
	}
	return svc.Errorf(svc.KindRuntime, "HTTP %d %s", status, http.StatusText(status))
}

func isJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	return mt == "application/json" || mt == "application/problem+json"
}

// validKindName accepts what looks like an error kind's name, so that a
// stray "error" member (say, an upstream's {"error": "oops, try again"}) is
// not mistaken for one.
func validKindName(s string) bool {
	if s == "" || len(s) > 64 || !strings.HasSuffix(s, "Error") {
		return false
	}
	for i, r := range s {
		if r > unicode.MaxASCII || !(unicode.IsLetter(r) || (i > 0 && unicode.IsDigit(r))) {
			return false
		}
	}
	return true
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if strings.TrimSpace(s) != "" {
			return s
		}
	}
	return ""
}

// quote returns the first 200 bytes of s on one line, printable only, for
// an error message.
func quote(s string) string {
	const max = 200
	s = strings.Join(strings.Fields(s), " ")
	s = strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) {
			return r
		}
		return -1
	}, s)
	if len(s) > max {
		cut := max
		for cut > 0 && !utfStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

func utfStart(b byte) bool { return b&0xC0 != 0x80 }
