package tools

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/schema"
)

func call(t *testing.T, tool svc.Tool, args string, out any) error {
	t.Helper()
	res, err := tool.Call(context.Background(), json.RawMessage(args))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(res, out); err != nil {
		t.Fatalf("result %s: %v", res, err)
	}
	return nil
}

func TestBuiltinNames(t *testing.T) {
	names := BuiltinNames()
	if !slices.IsSorted(names) || len(names) != 4 {
		t.Errorf("BuiltinNames() = %v", names)
	}
	b := Builtins(BuiltinOptions{})
	wantAccess := map[string]svc.Access{
		CurrentTime: svc.AccessRead, ReadFile: svc.AccessRead,
		WriteFile: svc.AccessWrite, HTTPGet: svc.AccessNetwork,
	}
	for _, name := range names {
		tool, ok := b[name]
		if !ok {
			t.Fatalf("Builtins lacks %s", name)
		}
		if tool.Name() != name || tool.Access() != wantAccess[name] || tool.Description() == "" {
			t.Errorf("%s: name %q access %v description %q", name, tool.Name(), tool.Access(), tool.Description())
		}
		if _, err := schema.Compile(tool.InputSchema()); err != nil {
			t.Errorf("%s: input schema: %v", name, err)
		}
	}
	if len(b) != len(names) {
		t.Errorf("Builtins has %d tools, BuiltinNames %d", len(b), len(names))
	}
}

func TestCurrentTime(t *testing.T) {
	tool := Builtins(BuiltinOptions{})[CurrentTime]
	tests := []struct{ args, zone string }{
		{`{}`, "UTC"},
		{``, "UTC"},
		{`{"timezone":"Asia/Tokyo"}`, "Asia/Tokyo"},
		{`{"timezone":"America/New_York"}`, "America/New_York"},
	}
	for _, tt := range tests {
		before := time.Now().Truncate(time.Second)
		var res TimeResult
		if err := call(t, tool, tt.args, &res); err != nil {
			t.Fatalf("%s: %v", tt.args, err)
		}
		after := time.Now()
		got, err := time.Parse(time.RFC3339, res.Time)
		if err != nil {
			t.Fatalf("time %q: %v", res.Time, err)
		}
		if got.Before(before) || got.After(after) {
			t.Errorf("time %v not between %v and %v", got, before, after)
		}
		loc, _ := time.LoadLocation(tt.zone)
		if _, off := got.Zone(); res.Timezone != tt.zone || off != func() int { _, o := time.Now().In(loc).Zone(); return o }() {
			t.Errorf("%s: result %+v has the wrong zone", tt.args, res)
		}
	}
	var res TimeResult
	err := call(t, tool, `{"timezone":"Mars/Olympus"}`, &res)
	if !errors.Is(err, svc.ErrToolExecution) || !strings.Contains(err.Error(), "Mars/Olympus") {
		t.Errorf("unknown zone: err = %v", err)
	}
}

// filesRoot makes root/ with a file, a subdirectory and a secret beside
// the root, plus symbolic links inside pointing in and out.
func filesRoot(t *testing.T) string {
	t.Helper()
	base := t.TempDir()
	root := filepath.Join(base, "root")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "sub"), 0o755))
	must(os.WriteFile(filepath.Join(root, "hello.txt"), []byte("hello"), 0o644))
	must(os.WriteFile(filepath.Join(root, "sub", "a.txt"), []byte("in sub"), 0o644))
	must(os.WriteFile(filepath.Join(base, "secret.txt"), []byte("secret"), 0o644))
	must(os.Symlink("hello.txt", filepath.Join(root, "link-in")))
	must(os.Symlink(filepath.Join(base, "secret.txt"), filepath.Join(root, "link-abs")))
	must(os.Symlink("../secret.txt", filepath.Join(root, "link-out")))
	must(os.Symlink("..", filepath.Join(root, "dir-out")))
	must(syscall.Mkfifo(filepath.Join(root, "fifo"), 0o644))
	return root
}

func TestReadFile(t *testing.T) {
	root := filesRoot(t)
	tool := Builtins(BuiltinOptions{FilesRoot: root})[ReadFile]
	ok := []struct{ path, content string }{
		{"hello.txt", "hello"},
		{"sub/a.txt", "in sub"},
		{"./sub/../hello.txt", "hello"},
		{"link-in", "hello"},
	}
	for _, tt := range ok {
		var res ReadResult
		if err := call(t, tool, `{"path":`+quote(tt.path)+`}`, &res); err != nil {
			t.Errorf("read %s: %v", tt.path, err)
			continue
		}
		if res.Content != tt.content || res.Path != tt.path || res.Truncated {
			t.Errorf("read %s = %+v", tt.path, res)
		}
	}
	bad := []struct{ path, want string }{
		{"../secret.txt", "leaves the files root"},
		{"sub/../../secret.txt", "leaves the files root"},
		{filepath.Join(filepath.Dir(root), "secret.txt"), "absolute"},
		{"/etc/passwd", "absolute"},
		{"link-out", "escapes"},
		{"link-abs", ""},
		{"dir-out/secret.txt", "escapes"},
		{"missing.txt", "no such file"},
		{"sub", "not a regular file"},
		{"fifo", "not a regular file"},
		{"", "empty path"},
	}
	for _, tt := range bad {
		var res ReadResult
		err := call(t, tool, `{"path":`+quote(tt.path)+`}`, &res)
		if err == nil {
			t.Errorf("read %s succeeded: %+v", tt.path, res)
			continue
		}
		if !errors.Is(err, svc.ErrToolExecution) || !strings.Contains(err.Error(), "tool read_file") || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("read %s: err %q; want a ToolExecutionError mentioning %q", tt.path, err, tt.want)
		}
		if strings.Contains(err.Error(), "secret\"") || res.Content == "secret" {
			t.Errorf("read %s leaked the secret", tt.path)
		}
	}
}

func TestReadFileLimit(t *testing.T) {
	root := filesRoot(t)
	tool := Builtins(BuiltinOptions{FilesRoot: root, MaxBytes: 3})[ReadFile]
	var res ReadResult
	if err := call(t, tool, `{"path":"hello.txt"}`, &res); err != nil {
		t.Fatal(err)
	}
	if res.Content != "hel" || !res.Truncated {
		t.Errorf("read with MaxBytes 3 = %+v; want hel, truncated", res)
	}
}

func TestWriteFile(t *testing.T) {
	root := filesRoot(t)
	tool := Builtins(BuiltinOptions{FilesRoot: root, MaxBytes: 100})[WriteFile]
	var res WriteResult
	if err := call(t, tool, `{"path":"new/deep/dir/out.txt","content":"data"}`, &res); err != nil {
		t.Fatal(err)
	}
	if res.Bytes != 4 || res.Path != "new/deep/dir/out.txt" {
		t.Errorf("result %+v", res)
	}
	if got, err := os.ReadFile(filepath.Join(root, "new", "deep", "dir", "out.txt")); err != nil || string(got) != "data" {
		t.Errorf("file holds %q, %v", got, err)
	}
	if err := call(t, tool, `{"path":"hello.txt","content":"replaced"}`, &res); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(root, "hello.txt")); string(got) != "replaced" {
		t.Errorf("overwrite left %q", got)
	}

	secret := filepath.Join(filepath.Dir(root), "secret.txt")
	bad := []struct{ path, want string }{
		{"../secret.txt", "leaves the files root"},
		{"../evil/x.txt", "leaves the files root"},
		{secret, "absolute"},
		{"link-out", "escapes"},
		{"dir-out/secret.txt", "escapes"},
		{"dir-out/new.txt", "escapes"},
		{"sub", "directory"},
	}
	for _, tt := range bad {
		err := call(t, tool, `{"path":`+quote(tt.path)+`,"content":"pwned"}`, &res)
		if !errors.Is(err, svc.ErrToolExecution) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("write %s: err %v; want a ToolExecutionError mentioning %q", tt.path, err, tt.want)
		}
	}
	if got, _ := os.ReadFile(secret); string(got) != "secret" {
		t.Errorf("secret outside the root became %q", got)
	}
	for _, p := range []string{"evil", "new.txt"} {
		if _, err := os.Stat(filepath.Join(filepath.Dir(root), p)); err == nil {
			t.Errorf("%s was created outside the root", p)
		}
	}
	if err := call(t, tool, `{"path":"big.txt","content":"`+strings.Repeat("x", 101)+`"}`, &res); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Errorf("write over MaxBytes: err = %v", err)
	}
}

func TestFilesRootMissing(t *testing.T) {
	b := Builtins(BuiltinOptions{})
	for _, tc := range []struct{ tool, args string }{
		{ReadFile, `{"path":"a.txt"}`},
		{WriteFile, `{"path":"a.txt","content":"x"}`},
	} {
		_, err := b[tc.tool].Call(context.Background(), json.RawMessage(tc.args))
		if !errors.Is(err, svc.ErrToolExecution) || !strings.Contains(err.Error(), "no --files-root configured") {
			t.Errorf("%s without a root: err = %v", tc.tool, err)
		}
	}
	b = Builtins(BuiltinOptions{FilesRoot: filepath.Join(t.TempDir(), "nope")})
	if _, err := b[ReadFile].Call(context.Background(), json.RawMessage(`{"path":"a"}`)); err == nil || !strings.Contains(err.Error(), "files root") {
		t.Errorf("read under a missing root: err = %v", err)
	}
}

func TestHTTPGet(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok":
			w.Write([]byte("hello body"))
		case "/missing":
			http.Error(w, "not here", http.StatusNotFound)
		case "/big":
			w.Write([]byte(strings.Repeat("b", 50)))
		case "/slow":
			<-r.Context().Done()
		case "/redirect":
			http.Redirect(w, r, "/ok", http.StatusFound)
		}
	}))
	defer srv.Close()
	if !strings.HasPrefix(srv.URL, "http://127.0.0.1:") {
		t.Fatalf("test server at %s, not on 127.0.0.1", srv.URL)
	}
	tool := Builtins(BuiltinOptions{HTTPClient: srv.Client(), MaxBytes: 20})[HTTPGet]

	tests := []struct {
		path      string
		status    int
		body      string
		truncated bool
	}{
		{"/ok", 200, "hello body", false},
		{"/missing", 404, "not here\n", false},
		{"/big", 200, strings.Repeat("b", 20), true},
		{"/redirect", 200, "hello body", false},
	}
	for _, tt := range tests {
		var res GetResult
		if err := call(t, tool, `{"url":`+quote(srv.URL+tt.path)+`}`, &res); err != nil {
			t.Errorf("GET %s: %v", tt.path, err)
			continue
		}
		if res.Status != tt.status || res.Body != tt.body || res.Truncated != tt.truncated {
			t.Errorf("GET %s = %+v", tt.path, res)
		}
	}

	for _, u := range []string{"file:///etc/passwd", "ftp://example.com/", "/relative", "http://", "::"} {
		var res GetResult
		if err := call(t, tool, `{"url":`+quote(u)+`}`, &res); !errors.Is(err, svc.ErrToolExecution) {
			t.Errorf("GET %s: err = %v; want a ToolExecutionError", u, err)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := tool.Call(ctx, json.RawMessage(`{"url":`+quote(srv.URL+"/slow")+`}`))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("GET /slow with a short deadline: err = %v", err)
	}
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// A FIFO under the files root must not hang write_file (or read_file):
// opening one for writing blocks until a reader comes, and none does. The
// call is refused as not a regular file, whether or not a reader holds the
// FIFO open.
func TestFileToolsRefuseFIFO(t *testing.T) {
	root := filesRoot(t)
	b := Builtins(BuiltinOptions{FilesRoot: root})
	callSoon := func(tool, args string) error {
		t.Helper()
		done := make(chan error, 1)
		go func() {
			_, err := b[tool].Call(context.Background(), json.RawMessage(args))
			done <- err
		}()
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			// Unblock the call so the test ends: a reader lets the open go on.
			if f, err := os.OpenFile(filepath.Join(root, "fifo"), os.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil {
				defer f.Close()
				<-done
			}
			t.Fatalf("%s %s still blocked after 10s", tool, args)
			return nil
		}
	}
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, svc.ErrToolExecution) || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("%s: err %v; want a ToolExecutionError saying it is not a regular file", what, err)
		}
	}
	check("write to a FIFO without a reader", callSoon(WriteFile, `{"path":"fifo","content":"x"}`))
	check("read from a FIFO without a writer", callSoon(ReadFile, `{"path":"fifo"}`))

	// With a reader holding it open, the open succeeds: the type check
	// after the open is what refuses it.
	r, err := os.OpenFile(filepath.Join(root, "fifo"), os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	check("write to a FIFO with a reader", callSoon(WriteFile, `{"path":"fifo","content":"x"}`))
	buf := make([]byte, 8)
	if n, _ := r.Read(buf); n > 0 {
		t.Errorf("write_file wrote %q into the FIFO", buf[:n])
	}
}
