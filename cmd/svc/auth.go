package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"
)

// authFlags are --auth-token and --auth-token-file, the bearer token of
// svc serve (which requires it) and of every client command (which sends
// it). The token comes from exactly one place: --auth-token-file, else
// --auth-token, else $SVC_AUTH_TOKEN.
type authFlags struct {
	token string
	file  string
	// fs is the flag set the flags are in, to tell a flag from the
	// environment default in error messages.
	fs *pflag.FlagSet
}

// register adds the two flags; what says what the token is for.
func (a *authFlags) register(fs *pflag.FlagSet, what string) {
	a.fs = fs
	fs.StringVar(&a.token, "auth-token", envOr("SVC_AUTH_TOKEN", ""), what+" (default $SVC_AUTH_TOKEN; visible in ps: prefer --auth-token-file)")
	fs.StringVar(&a.file, "auth-token-file", "", "read the bearer token from this file instead (surrounding whitespace, such as the final newline, is dropped) (default: none)")
}

// resolve returns the token to use, "" for none. A token that is empty
// after all (an empty file) or whitespace-only, or that has surrounding
// whitespace (HTTP drops it from a header, so it could never match), is a
// usage error: a server started with it would lock everyone out, a client
// sending it would be refused.
func (a *authFlags) resolve() (string, error) {
	if a.file != "" {
		if a.fs != nil && a.fs.Changed("auth-token") {
			return "", errors.New("give --auth-token or --auth-token-file, not both")
		}
		data, err := os.ReadFile(a.file)
		if err != nil {
			return "", fmt.Errorf("--auth-token-file: %w", err)
		}
		tok := strings.TrimSpace(string(data))
		if tok == "" {
			return "", fmt.Errorf("--auth-token-file %s: the file is empty (or only whitespace); want the token", a.file)
		}
		if strings.ContainsAny(tok, "\r\n") {
			return "", fmt.Errorf("--auth-token-file %s: the token spans several lines; want one line", a.file)
		}
		return tok, nil
	}
	source := "--auth-token"
	if a.fs == nil || !a.fs.Changed("auth-token") {
		source = "$SVC_AUTH_TOKEN"
	}
	switch {
	case a.token == "":
		return "", nil
	case strings.TrimSpace(a.token) == "":
		return "", fmt.Errorf("%s is only whitespace; give a real token, or none", source)
	case strings.TrimSpace(a.token) != a.token:
		return "", fmt.Errorf("%s has leading or trailing whitespace, which HTTP drops from the header: remove it", source)
	case strings.ContainsAny(a.token, "\r\n"):
		return "", fmt.Errorf("%s contains a line break", source)
	}
	return a.token, nil
}
