package conns

import (
	"bytes"
	"net/http"
	"strconv"
)

// rawErrorHeaders are the headers net/http writes, straight to the
// connection, when it answers a request it could not parse (server.go,
// conn.serve: a malformed request line, an invalid % escape, headers over
// MaxHeaderBytes). No handler runs, so no middleware can shape that
// answer; the connection can: a write that is exactly such an answer
// ("HTTP/1.1 " code text, these headers, the text again) is one net/http
// made, since every other answer carries a Date header.
const rawErrorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

// rewriteRawError returns net/http's plain-text 4xx answer p as a
// problem+json answer with the same status, whose detail is net/http's
// text, or false when p is anything else.
func rewriteRawError(p []byte, problem func(status int, detail string) []byte) ([]byte, bool) {
	const prefix = "HTTP/1.1 4"
	if len(p) < len(prefix)+2 || string(p[:len(prefix)]) != prefix {
		return nil, false
	}
	head, body, ok := bytes.Cut(p, []byte(rawErrorHeaders))
	if !ok || bytes.ContainsAny(head, "\r\n") {
		return nil, false
	}
	status, err := strconv.Atoi(string(head[len("HTTP/1.1 ") : len("HTTP/1.1 ")+3]))
	if err != nil || status < 400 || status > 499 {
		return nil, false
	}
	// The body repeats the status line's "400 Bad Request: reason"; the
	// reason, when there is one, is the detail.
	detail := string(body)
	if _, reason, ok := bytes.Cut(body, []byte(": ")); ok {
		detail = string(reason)
	}
	doc := problem(status, detail)
	var b bytes.Buffer
	b.Grow(160 + len(doc))
	b.WriteString("HTTP/1.1 ")
	b.WriteString(strconv.Itoa(status))
	b.WriteByte(' ')
	b.WriteString(http.StatusText(status))
	b.WriteString("\r\nContent-Type: application/problem+json\r\nX-Content-Type-Options: nosniff\r\nConnection: close\r\nContent-Length: ")
	b.WriteString(strconv.Itoa(len(doc)))
	b.WriteString("\r\n\r\n")
	b.Write(doc)
	return b.Bytes(), true
}
