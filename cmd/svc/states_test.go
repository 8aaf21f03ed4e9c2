package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The README's fan-out with a failed branch: the run completes (the group
// succeeded), and its tree says the same, a completed root with the
// failed branch marked failed under it (issue 28: the root said failed
// under a run whose state was completed).
func TestGroupTreeAgreesWithRunState(t *testing.T) {
	t.Parallel()
	s := startServe(t, nil, "--specs", exampleSpecs)
	get := func(path string, v any) int {
		t.Helper()
		resp, err := http.Get(s.url + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode == http.StatusNotFound {
			return resp.StatusCode
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, body)
		}
		if err := json.Unmarshal(body, v); err != nil {
			t.Fatalf("GET %s: %v: %s", path, err, body)
		}
		return resp.StatusCode
	}
	resp, err := http.Post(s.url+"/submit", "application/json",
		strings.NewReader(`{"target":"fanout","kind":"group","task":{"input":{"items":["a","bad","c"]}}}`))
	if err != nil {
		t.Fatal(err)
	}
	var sub struct {
		RunID string `json:"run_id"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&sub)
	resp.Body.Close()
	var st struct {
		State   string `json:"state"`
		TraceID string `json:"trace_id"`
	}
	deadline := time.Now().Add(30 * time.Second)
	for get("/runs/"+sub.RunID+"/status", &st); st.State == "pending" || st.State == "running"; get("/runs/"+sub.RunID+"/status", &st) {
		if time.Now().After(deadline) {
			t.Fatalf("run %s still %s after 30 s", sub.RunID, st.State)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st.State != "completed" {
		t.Fatalf("the fan-out with a bad item ended %s, want completed (the README's example)", st.State)
	}
	type node struct {
		Kind, Name, Status string
		Children           []node
	}
	// The events are stored in the background: the tree is complete once
	// its root is no longer running.
	var tree struct{ Root node }
	for get("/runs/"+st.TraceID+"/tree", &tree) != http.StatusOK || tree.Root.Status == "running" {
		if time.Now().After(deadline) {
			t.Fatalf("the tree of %s is not complete after 30 s: %+v", st.TraceID, tree.Root)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if tree.Root.Kind != "group" || tree.Root.Status != "completed" {
		t.Errorf("tree root %s %s %s, want the group completed as its run", tree.Root.Kind, tree.Root.Name, tree.Root.Status)
	}
	failed := 0
	for _, c := range tree.Root.Children {
		if c.Status == "failed" {
			failed++
		}
	}
	if failed != 1 {
		t.Errorf("%d failed children under the root, want the bad item's branch: %+v", failed, tree.Root.Children)
	}
}
