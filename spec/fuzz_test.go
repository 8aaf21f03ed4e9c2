package spec

import (
	"encoding/json"
	"io/fs"
	"strings"
	"testing"
)

// fuzzRefs stands in for the file system: $ref'd schema files come from
// here, so the fuzzer cannot make the decoder read real files.
func fuzzRead(path string) ([]byte, error) {
	switch {
	case strings.HasSuffix(path, "ok.json"):
		return []byte(`{"type":"object","properties":{"a":{"type":"string"}}}`), nil
	case strings.HasSuffix(path, "ok.yaml"):
		return []byte("type: object\nproperties: {a: {type: string}}\n"), nil
	case strings.HasSuffix(path, "bad.json"):
		return []byte("{\n  nope"), nil
	}
	return nil, fs.ErrNotExist
}

func FuzzDecodeAgent(f *testing.F) {
	for _, seed := range []string{
		triageYAML,
		aliasBomb,
		"version: 1\nmodel: test:echo\n",
		"version: 1\nname: x\nmodel: test:echo\ninput_type: {$ref: ok.json}\noutput_type: {$ref: ok.yaml}\n",
		"version: 1\nmodel: test:echo\ninput_type: {$ref: bad.json}\ntools: [http_get, nope]\ntrust_level: low\n",
		"version: 1\nmodel: test:echo\nmcp_servers: [{name: s, transport: sse, url: 'http://h/x'}, {name: s}]\n",
		"version: 1\nmodel: test:echo\nmodel_settings: &a {b: *a}\n",
		"version: 1\nmodel: test:echo\nmodel_settings: {<<: {a: 1}}\n",
		"- [\n",
		"version: 1\n---\n",
	} {
		f.Add([]byte(seed))
	}
	env := testEnv()
	f.Fuzz(func(t *testing.T, data []byte) {
		const file = "specs/agents/x.yaml"
		got, errs := decodeAgent(file, data, env, fuzzRead)
		if len(errs) > 0 {
			for _, e := range errs {
				if e.File == "" || e.Msg == "" || e.Line < 0 || !strings.HasPrefix(e.Error(), e.File) {
					t.Fatalf("malformed error %#v", e)
				}
			}
			return
		}
		// An accepted spec is an agent a runtime accepts.
		a := got.agent
		if err := a.Validate(); err != nil {
			t.Fatalf("accepted an agent that does not validate: %v", err)
		}
		if a.Name != "x" {
			t.Fatalf("accepted name %q for file %s", a.Name, file)
		}
		for _, s := range []json.RawMessage{a.InputType, a.OutputType} {
			if s != nil && checkSchema(s) != nil {
				t.Fatalf("accepted schema %s", s)
			}
		}
		if _, err := json.Marshal(a.ModelSettings); err != nil {
			t.Fatalf("model_settings do not encode: %v", err)
		}
		if !a.Trust().Valid() {
			t.Fatalf("trust %q", a.TrustLevel)
		}
		for _, tool := range a.Tools {
			if !a.Trust().Allows(tool.Access()) {
				t.Fatalf("tool %s above trust %s", tool.Name(), a.Trust())
			}
		}
	})
}

func FuzzDecodeOptions(f *testing.F) {
	for _, seed := range []string{
		"version: 1\n",
		"version: 1\ntimeout_seconds: 12.5\nmax_spawn_depth: 0\nretry_max_attempts: 3\nretry_backoff_factor: 2\ntoken_budget: 50_000\nmcp_eager_start: true\n",
		"version: 1\ntimeout_seconds: .nan\n",
		"version: 1\nmax_spawn_depth: 99999999999999999999\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		o, errs := decodeOptions("runtime.yaml", data)
		if len(errs) > 0 {
			return
		}
		if err := o.Validate(); err != nil {
			t.Fatalf("accepted invalid options %+v: %v", o, err)
		}
	})
}
