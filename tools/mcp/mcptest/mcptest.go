// Package mcptest finds and runs the reference MCP server,
// @modelcontextprotocol/server-everything, for tests: the real server
// from npm, installed outside the repository's tracked files by
//
//	npm install --prefix .cache/mcp @modelcontextprotocol/server-everything@2026.8.31
//
// (.ci/run does it). SVC_MCP_EVERYTHING names another install directory.
// Without the server (or node) tests skip, except under CI (CI=true), where
// they fail.
package mcptest

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// Install is the command that installs the server, from the module root.
const Install = "npm install --prefix .cache/mcp @modelcontextprotocol/server-everything@2026.8.31"

// Everything returns the path of the server's entry point (run it with
// `node ENTRY stdio|streamableHttp|sse`), or skips (fails under CI) when it
// or node is missing.
func Everything(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("SVC_MCP_EVERYTHING")
	if dir == "" {
		dir = filepath.Join(moduleRoot(t), ".cache", "mcp")
	}
	entry, err := filepath.Abs(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js"))
	if err != nil {
		t.Fatal(err)
	}
	missing := ""
	if _, err := os.Stat(entry); err != nil {
		missing = "server-everything is not installed at " + entry + "; from the repository root run: " + Install
	} else if _, err := exec.LookPath("node"); err != nil {
		missing = "node is not on PATH"
	}
	if missing != "" {
		if os.Getenv("CI") == "true" {
			t.Fatal(missing)
		}
		t.Skip(missing)
	}
	return entry
}

// moduleRoot is the nearest directory above the working directory (a
// test's package directory) holding go.mod.
func moduleRoot(t testing.TB) string {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("mcptest: no go.mod above the working directory")
		}
		dir = up
	}
}

// StartHTTP runs the server in an HTTP mode ("streamableHttp", serving
// /mcp, or "sse", serving /sse) on a free loopback port until the test
// ends, and returns the port. The whole process group is killed at the
// end.
func StartHTTP(t testing.TB, entry, mode string) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command("node", entry, mode)
	cmd.Env = append(os.Environ(), "PORT="+strconv.Itoa(port))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
		if t.Failed() {
			t.Logf("server-everything %s output:\n%s", mode, out.String())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port)); err == nil {
			c.Close()
			return port
		}
		select {
		case <-exited:
			t.Fatalf("server-everything %s exited before listening", mode)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("server-everything %s did not listen within 30s", mode)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
