package tools

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"syscall"
	"time"
	// Embedded zone data: current_time must know every IANA zone even in a
	// container image without /usr/share/zoneinfo.
	_ "time/tzdata"

	"github.com/svc-dev/svc"
)

// DefaultMaxBytes bounds what read_file reads, write_file writes and
// http_get keeps of a body, when BuiltinOptions.MaxBytes is zero.
const DefaultMaxBytes = 1 << 20

// httpTimeout bounds one http_get call, whatever the run's own deadline.
const httpTimeout = 30 * time.Second

// BuiltinOptions configure the built-in tools.
type BuiltinOptions struct {
	// FilesRoot is the directory read_file and write_file are confined to
	// (--files-root). Empty disables them: they fail when called.
	FilesRoot string
	// HTTPClient makes http_get's requests; nil means a client with
	// http.DefaultTransport.
	HTTPClient *http.Client
	// MaxBytes is the size limit (DefaultMaxBytes when zero or less).
	MaxBytes int64
}

// Built-in tool names.
const (
	CurrentTime = "current_time"
	ReadFile    = "read_file"
	WriteFile   = "write_file"
	HTTPGet     = "http_get"
)

// BuiltinNames returns the names of the built-in tools, sorted.
func BuiltinNames() []string {
	names := []string{CurrentTime, ReadFile, WriteFile, HTTPGet}
	slices.Sort(names)
	return names
}

// Builtins returns the built-in tools by name. Each call returns new tools;
// they are safe for concurrent use.
func Builtins(o BuiltinOptions) map[string]svc.Tool {
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{}
	}
	b := builtins{o}
	return map[string]svc.Tool{
		CurrentTime: MustFunc(CurrentTime, "Returns the current date and time in RFC 3339 form, in UTC or the given IANA time zone.",
			svc.AccessRead, b.currentTime),
		ReadFile: MustFunc(ReadFile, "Reads a text file under the configured files root. The path is relative to that root.",
			svc.AccessRead, b.readFile),
		WriteFile: MustFunc(WriteFile, "Writes a text file under the configured files root, creating parent directories. The path is relative to that root.",
			svc.AccessWrite, b.writeFile),
		HTTPGet: MustFunc(HTTPGet, "Fetches a URL with HTTP GET and returns the status code and the body.",
			svc.AccessNetwork, b.httpGet),
	}
}

type builtins struct{ o BuiltinOptions }

// TimeArgs are current_time's arguments.
type TimeArgs struct {
	Timezone string `json:"timezone,omitempty" jsonschema:"IANA time zone name such as Europe/Oslo; UTC when omitted"`
}

// TimeResult is current_time's result.
type TimeResult struct {
	Time     string `json:"time"`
	Timezone string `json:"timezone"`
}

func (b builtins) currentTime(_ context.Context, in TimeArgs) (TimeResult, error) {
	name := in.Timezone
	if name == "" {
		name = "UTC"
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return TimeResult{}, fmt.Errorf("unknown time zone %q", in.Timezone)
	}
	return TimeResult{Time: time.Now().In(loc).Format(time.RFC3339), Timezone: name}, nil
}

// ReadArgs are read_file's arguments.
type ReadArgs struct {
	Path string `json:"path" jsonschema:"file path relative to the files root"`
}

// ReadResult is read_file's result. Truncated is set when the file was
// longer than the size limit and Content holds its start.
type ReadResult struct {
	Path      string `json:"path"`
	Content   string `json:"content"`
	Truncated bool   `json:"truncated,omitempty"`
}

func (b builtins) readFile(_ context.Context, in ReadArgs) (ReadResult, error) {
	root, name, err := b.openRoot(in.Path)
	if err != nil {
		return ReadResult{}, err
	}
	defer root.Close()
	f, err := openRegular(root, name, in.Path, os.O_RDONLY)
	if err != nil {
		return ReadResult{}, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, b.o.MaxBytes+1))
	if err != nil {
		return ReadResult{}, pathError(in.Path, err)
	}
	res := ReadResult{Path: in.Path}
	if int64(len(data)) > b.o.MaxBytes {
		data, res.Truncated = data[:b.o.MaxBytes], true
	}
	res.Content = string(data)
	return res, nil
}

// WriteArgs are write_file's arguments.
type WriteArgs struct {
	Path    string `json:"path" jsonschema:"file path relative to the files root"`
	Content string `json:"content" jsonschema:"the text to write; replaces the file"`
}

// WriteResult is write_file's result.
type WriteResult struct {
	Path  string `json:"path"`
	Bytes int    `json:"bytes"`
}

func (b builtins) writeFile(ctx context.Context, in WriteArgs) (WriteResult, error) {
	if int64(len(in.Content)) > b.o.MaxBytes {
		return WriteResult{}, fmt.Errorf("content is %d bytes, over the %d-byte limit", len(in.Content), b.o.MaxBytes)
	}
	root, name, err := b.openRoot(in.Path)
	if err != nil {
		return WriteResult{}, err
	}
	defer root.Close()
	if err := ctx.Err(); err != nil {
		return WriteResult{}, err
	}
	if dir := path.Dir(name); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return WriteResult{}, pathError(in.Path, err)
		}
	}
	f, err := openRegular(root, name, in.Path, os.O_WRONLY|os.O_CREATE)
	if err != nil {
		return WriteResult{}, err
	}
	// Truncate only once the file is known to be a regular one.
	err = f.Truncate(0)
	if err == nil {
		_, err = f.Write([]byte(in.Content))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return WriteResult{}, pathError(in.Path, err)
	}
	return WriteResult{Path: in.Path, Bytes: len(in.Content)}, nil
}

// openRegular opens name under root with flag and refuses anything but a
// regular file. The open is non-blocking: opening a FIFO blocks until its
// other end is opened (forever, for a FIFO nobody reads), and a device may
// never end; checking the type of what was opened, not of what a Stat saw
// before, leaves no window for the path to change in between. O_NONBLOCK
// changes nothing for a regular file.
func openRegular(root *os.Root, name, p string, flag int) (*os.File, error) {
	f, err := root.OpenFile(name, flag|syscall.O_NONBLOCK, 0o644)
	if err != nil {
		if errors.Is(err, syscall.ENXIO) {
			// A FIFO opened for writing without a reader.
			return nil, fmt.Errorf("%s is not a regular file", p)
		}
		return nil, pathError(p, err)
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, pathError(p, err)
	}
	if !info.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s is not a regular file", p)
	}
	return f, nil
}

// openRoot opens the files root and checks p: relative, and not leaving
// the root lexically. os.Root enforces the rest (symbolic links leading
// out); the lexical check gives the clearer message.
func (b builtins) openRoot(p string) (*os.Root, string, error) {
	if b.o.FilesRoot == "" {
		return nil, "", errors.New("no --files-root configured")
	}
	if p == "" {
		return nil, "", errors.New("empty path")
	}
	if filepath.IsAbs(p) || path.IsAbs(p) {
		return nil, "", fmt.Errorf("path %q is absolute; give a path relative to the files root", p)
	}
	name := path.Clean(filepath.ToSlash(p))
	if !fs.ValidPath(name) {
		return nil, "", fmt.Errorf("path %q leaves the files root", p)
	}
	root, err := os.OpenRoot(b.o.FilesRoot)
	if err != nil {
		return nil, "", fmt.Errorf("files root: %w", err)
	}
	return root, name, nil
}

// pathError restates an *os.PathError with the path the model gave: the
// system call names ("statat", "openat") mean nothing to it.
func pathError(p string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", p, pe.Err)
	}
	return fmt.Errorf("%s: %w", p, err)
}

// GetArgs are http_get's arguments.
type GetArgs struct {
	URL string `json:"url" jsonschema:"the http or https URL to fetch"`
}

// GetResult is http_get's result. Truncated is set when the body was longer
// than the size limit and Body holds its start.
type GetResult struct {
	Status    int    `json:"status"`
	Body      string `json:"body"`
	Truncated bool   `json:"truncated,omitempty"`
}

func (b builtins) httpGet(ctx context.Context, in GetArgs) (GetResult, error) {
	u, err := url.Parse(in.URL)
	if err != nil {
		return GetResult{}, fmt.Errorf("url: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return GetResult{}, fmt.Errorf("url %q: want an absolute http or https URL", in.URL)
	}
	ctx, cancel := context.WithTimeout(ctx, httpTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return GetResult{}, err
	}
	resp, err := b.o.HTTPClient.Do(req)
	if err != nil {
		return GetResult{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, b.o.MaxBytes+1))
	if err != nil {
		return GetResult{}, fmt.Errorf("reading body: %w", err)
	}
	res := GetResult{Status: resp.StatusCode}
	if int64(len(body)) > b.o.MaxBytes {
		body, res.Truncated = body[:b.o.MaxBytes], true
	}
	res.Body = string(body)
	return res, nil
}
