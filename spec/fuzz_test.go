package spec

import (
	"encoding/json"
	"errors"
	"io/fs"
	"strings"
	"testing"

	"github.com/svc-dev/svc"
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
		"version: 1\ntimeout_seconds: 12.5\nmax_spawn_depth: 0\nretry_max_attempts: 3\nretry_backoff_factor: 2\ntoken_budget: 50_000\nmax_tokens_per_run: 4000\nmcp_eager_start: true\n",
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

func FuzzDecodeGroup(f *testing.F) {
	for _, seed := range []string{
		supportYAML,
		teamYAML,
		"version: 1\nnodes: {a: {agent: a}, b: {agent: b}}\nedges: [{from: a, to: b}, {from: b, to: a}]\n",
		"version: 1\nnodes: {a: {agent: a}, b: {agent: b}}\nedges: [{from: a, to: b, when: 'output.x ==', fan_out: '1'}]\n",
		"version: 1\nkind: team\ncoordinator: a\ndelegates: [a, a]\nmax_rounds: 0\n",
		"version: 1\nnodes: &n {a: {agent: *n}}\n",
		"version: 1\nnodes: {<<: {a: {agent: x}}}\n",
		"- [\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		const file = "specs/groups/x.yaml"
		dec, errs := decodeGroup(file, data)
		lines := 1 + strings.Count(string(data), "\n")
		check := func(errs []*Error) {
			for _, e := range errs {
				if e.File != file || e.Msg == "" || e.Line < 0 || !strings.HasPrefix(e.Error(), e.File) {
					t.Fatalf("malformed error %#v", e)
				}
			}
		}
		check(errs)
		if len(errs) > 0 {
			return
		}
		g := dec.group
		if g.Name != "x" || (g.Kind != svc.GroupGraph && g.Kind != svc.GroupTeam) {
			t.Fatalf("accepted name %q, kind %q", g.Name, g.Kind)
		}
		// Whatever Compile says about a well-formed group, every problem
		// lands on a line of the file and is a TopologyError.
		cerrs := compileGroup(file, dec, func(name string) bool { return name != "ghost" })
		check(cerrs)
		for _, e := range cerrs {
			if !errors.Is(e, svc.ErrTopology) || e.Line < 1 || e.Line > lines {
				t.Fatalf("compile error %v: not a TopologyError with a line", e)
			}
		}
	})
}
