package spec

import (
	"io"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/svc-dev/svc"
)

// SpecVersion is the only `version:` this build reads.
const SpecVersion = 1

var optionKeys = []string{
	"version", "timeout_seconds", "max_spawn_depth", "retry_max_attempts",
	"retry_backoff_factor", "token_budget", "max_tokens_per_run", "mcp_eager_start",
	"delta_interval_ms", "delta_bytes", "rate_limits", "max_spawn_children",
	"approval_timeout_seconds", "approval_timeout_action",
}

// rateLimitKeys are the keys of one limit under rate_limits.
var rateLimitKeys = []string{"requests_per_minute", "tokens_per_minute", "max_concurrent"}

// LoadOptions reads a runtime.yaml: `version: 1` and any of the option names
// of svc.Options. Options it leaves out, or sets to null, keep the defaults
// of svc.DefaultOptions. The result passes svc.Options.Validate; every
// error is an *Error (joined when there are several).
func LoadOptions(path string) (svc.Options, error) {
	data, err := readSpecFile(path)
	if err != nil {
		return svc.Options{}, err
	}
	o, errs := decodeOptions(path, data)
	if len(errs) > 0 {
		return svc.Options{}, joinErrors(errs)
	}
	return o, nil
}

func decodeOptions(file string, data []byte) (svc.Options, []*Error) {
	root, perr := parseMapping(file, data, "a mapping of runtime options with version: 1")
	if perr != nil {
		return svc.Options{}, []*Error{perr}
	}
	d := newDecoder(file, len(data))
	fs := d.fields(root, "", optionKeys)
	d.version(root, fs)

	o := svc.DefaultOptions()
	set := func(key string, decode func(f field)) {
		if f, ok := fs[key]; ok && !isNull(f.val) {
			decode(f)
		}
	}
	set("timeout_seconds", func(f field) {
		if v, ok := d.number(f.val, "timeout_seconds"); ok {
			o.TimeoutSeconds = v
		}
	})
	set("max_spawn_depth", func(f field) {
		if v, ok := d.intValue(f.val, "max_spawn_depth"); ok {
			o.MaxSpawnDepth = v
		}
	})
	set("max_spawn_children", func(f field) {
		if v, ok := d.intValue(f.val, "max_spawn_children"); ok {
			o.MaxSpawnChildren = v
		}
	})
	set("approval_timeout_seconds", func(f field) {
		if v, ok := d.number(f.val, "approval_timeout_seconds"); ok {
			o.ApprovalTimeoutSeconds = v
		}
	})
	set("approval_timeout_action", func(f field) {
		if v, ok := d.str(f.val, "approval_timeout_action"); ok {
			o.ApprovalTimeoutAction = v
		}
	})
	set("retry_max_attempts", func(f field) {
		if v, ok := d.intValue(f.val, "retry_max_attempts"); ok {
			o.RetryMaxAttempts = v
		}
	})
	set("retry_backoff_factor", func(f field) {
		if v, ok := d.number(f.val, "retry_backoff_factor"); ok {
			o.RetryBackoffFactor = v
		}
	})
	set("token_budget", func(f field) {
		if v, ok := d.integer(f.val, "token_budget"); ok {
			o.TokenBudget = v
		}
	})
	set("max_tokens_per_run", func(f field) {
		if v, ok := d.integer(f.val, "max_tokens_per_run"); ok {
			o.MaxTokensPerRun = v
		}
	})
	set("mcp_eager_start", func(f field) {
		if v, ok := d.boolean(f.val, "mcp_eager_start"); ok {
			o.MCPEagerStart = v
		}
	})
	set("delta_interval_ms", func(f field) {
		if v, ok := d.intValue(f.val, "delta_interval_ms"); ok {
			o.DeltaIntervalMS = v
		}
	})
	set("delta_bytes", func(f field) {
		if v, ok := d.intValue(f.val, "delta_bytes"); ok {
			o.DeltaBytes = v
		}
	})
	set("rate_limits", func(f field) { o.RateLimits = d.rateLimits(f.val) })
	if len(d.errs) > 0 {
		return svc.Options{}, d.finish()
	}
	if err := o.Validate(); err != nil {
		// Options.Validate names the option first ("timeout_seconds 0: must
		// be ..."); point at that key's line.
		msg := svc.ErrorInfoOf(err).Message
		key, _, _ := strings.Cut(msg, " ")
		if f, ok := fs[key]; ok {
			d.fail(f.val, key, "%s", strings.TrimPrefix(msg, key+" "))
		} else {
			d.fail(root, "", "%s", msg)
		}
		return svc.Options{}, d.errs
	}
	return o, nil
}

// rateLimits decodes rate_limits: limit names to limits, each with at
// least one of rateLimitKeys, every value positive.
func (d *decoder) rateLimits(n *yaml.Node) map[string]svc.RateLimit {
	if n.Kind != yaml.MappingNode {
		d.fail(n, "rate_limits", "want a mapping of limit names to limits, got %s", describe(n))
		return nil
	}
	out := make(map[string]svc.RateLimit, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		path := join("rate_limits", k.Value)
		switch {
		case k.Kind != yaml.ScalarNode:
			d.fail(k, "rate_limits", "limit names must be plain names, got %s", describe(k))
			continue
		case !svc.ValidName(k.Value):
			d.fail(k, "rate_limits", "limit name %q: use letters, digits, '_', '-' and '.', starting with a letter or digit", k.Value)
			continue
		case v.Kind != yaml.MappingNode:
			d.fail(v, path, "want a mapping with any of %s, got %s", strings.Join(rateLimitKeys, ", "), describe(v))
			continue
		}
		if _, dup := out[k.Value]; dup {
			d.fail(k, path, "repeated")
			continue
		}
		fs := d.fields(v, path, rateLimitKeys)
		var l svc.RateLimit
		positive := func(key string, into *float64) {
			if f, ok := fs[key]; ok {
				if x, ok := d.number(f.val, join(path, key)); ok {
					if !(x > 0) {
						d.fail(f.val, join(path, key), "%v: must be a positive number", x)
					}
					*into = x
				}
			}
		}
		positive("requests_per_minute", &l.RequestsPerMinute)
		positive("tokens_per_minute", &l.TokensPerMinute)
		if f, ok := fs["max_concurrent"]; ok {
			if x, ok := d.intValue(f.val, join(path, "max_concurrent")); ok {
				if x <= 0 {
					d.fail(f.val, join(path, "max_concurrent"), "%d: must be a positive number", x)
				}
				l.MaxConcurrent = x
			}
		}
		if len(fs) == 0 {
			d.fail(v, path, "give any of %s", strings.Join(rateLimitKeys, ", "))
		}
		out[k.Value] = l
	}
	return out
}

// intValue decodes an int, the type of the int options.
func (d *decoder) intValue(n *yaml.Node, key string) (int, bool) {
	v, ok := d.integer(n, key)
	if ok && int64(int(v)) != v {
		d.fail(n, key, "%d is out of range", v)
		return 0, false
	}
	return int(v), ok
}

// version checks the `version: 1` every spec file starts with.
func (d *decoder) version(root *yaml.Node, fs map[string]field) {
	f, ok := fs["version"]
	if !ok {
		d.fail(root, "version", "missing: add `version: %d`", SpecVersion)
		return
	}
	r := resolve(f.val)
	var v int64
	if r.Kind == yaml.ScalarNode && r.ShortTag() == "!!int" && r.Decode(&v) == nil && v == SpecVersion {
		return
	}
	d.fail(f.val, "version", "want %d, got %s (this build reads version %d specs)", SpecVersion, describe(f.val), SpecVersion)
}

// maxFileSize bounds what is read of one spec or schema file: far above
// any real spec, and low enough that a mistaken path (a log, a device) is
// refused instead of read into memory.
const maxFileSize = 4 << 20

// readSpecFile reads a regular file of at most maxFileSize bytes.
func readSpecFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, &Error{File: path, Msg: describeFSError(err), cause: err}
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, &Error{File: path, Msg: describeFSError(err), cause: err}
	}
	if !info.Mode().IsRegular() {
		return nil, &Error{File: path, Msg: "not a regular file"}
	}
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, &Error{File: path, Msg: describeFSError(err), cause: err}
	}
	if len(data) > maxFileSize {
		return nil, &Error{File: path, Msg: "file too large (the limit is 4 MiB)"}
	}
	return data, nil
}
