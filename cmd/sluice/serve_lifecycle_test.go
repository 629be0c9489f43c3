package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	stdlog "log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// --playground=false wins on the built-in demo, whose playground is on
// only by default: the dashboard refuses simulations (403).
func TestServePlaygroundOffOnTheDemo(t *testing.T) {
	p := startSluice(t, []string{"proxy", "check", "admin"}, "--playground=false")
	resp, err := http.Post("http://"+p.addrs["admin"]+"/api/sim", "application/json", strings.NewReader(`{"scenario":"boundary"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a simulation on the demo with --playground=false: %d, want 403", resp.StatusCode)
	}
}

// SLUICE_PLAYGROUND=false turns the demo's playground off as the flag
// does; a flag or variable left alone leaves the demo's default.
func TestServePlaygroundOffByEnv(t *testing.T) {
	for _, tt := range []struct {
		args []string
		env  string
		off  bool
	}{
		{nil, "", false},
		{nil, "false", true},
		{[]string{"--playground=false"}, "", true},
		{[]string{"--playground"}, "false", false},
		{nil, "true", false},
	} {
		f, err := parseServeFlags(tt.args, func(k string) string {
			if k == "SLUICE_PLAYGROUND" {
				return tt.env
			}
			return ""
		}, os.Stderr)
		if err != nil {
			t.Fatal(err)
		}
		if f.o.NoPlayground != tt.off {
			t.Errorf("%q, SLUICE_PLAYGROUND=%q: NoPlayground %t, want %t", tt.args, tt.env, f.o.NoPlayground, tt.off)
		}
	}
}

// A SIGTERM while sluice waits for Redis at start stops it without
// opening a listener: it was stopping, and a listener opened then would
// take connections only to close them.
func TestServeSIGTERMAtStartOpensNoListener(t *testing.T) {
	redis, conns := silentRedis(t)
	var err error
	cmd := sluiceCommand(t, "serve", "--log-format", "json", "--redis", "redis://"+redis.Addr().String()+"/0",
		"--listen", "127.0.0.1:0", "--check-listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	select {
	case c := <-conns:
		conns <- c
	case <-time.After(10 * time.Second):
		t.Fatal("sluice did not connect to the Redis")
	}
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("sluice did not exit within 20s")
	}
	if err != nil {
		t.Errorf("exit %v, want 0: stopped by a signal", err)
	}
	if strings.Contains(stderr.String(), `"msg":"listening"`) {
		t.Errorf("a listener opened after SIGTERM:\n%s", stderr.String())
	}
}

// What Go's standard library prints through package log, such as
// net/http's transport on an upstream that sends more than its
// Content-Length, is a record of sluice's log at WARN, JSON with
// --log-format json, rather than a plain line in its midst.
func TestServeStandardLogIsJSON(t *testing.T) {
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	go func() {
		for {
			c, err := up.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				if _, err := http.ReadRequest(br); err != nil {
					return
				}
				// Two bytes promised, seven sent.
				c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA"))
				br.ReadByte() // until the proxy closes the connection
			}()
		}
	}()
	cfg := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(cfg, []byte("policies:\n  - {name: api, limits: [\"100/m\"]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startSluice(t, []string{"proxy"}, "--config", cfg, "--upstream", "http://"+up.Addr().String())
	if code, body := httpGet(t, "http://"+p.addrs["proxy"]+"/"); code != 200 || body != "ok" {
		t.Fatalf("through the proxy: %d %q", code, body)
	}
	// The transport sees the extra bytes on its idle connection and
	// says so, on its own goroutine: waited for, as another process's
	// output.
	deadline := time.Now().Add(10 * time.Second)
	var line string
	for line == "" {
		for l := range strings.SplitSeq(p.logs(), "\n") {
			if strings.Contains(l, "Unsolicited response") {
				line = l
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("net/http's transport did not report the unsolicited response")
		}
		time.Sleep(10 * time.Millisecond)
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(line), &rec); err != nil || rec["level"] != "WARN" {
		t.Errorf("the transport's line %q: want a JSON record at WARN (%v)", line, err)
	}
}

// The standard logger's lines are paced as sluice's own repeated
// warnings are: one a second, the next saying how many were left out.
func TestStdLogPaced(t *testing.T) {
	var buf bytes.Buffer
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	defer routeStdLog(slog.New(slog.NewJSONHandler(&buf, nil)), func() time.Time { return now })()
	stdlog.Print("one")
	stdlog.Print("two")
	now = now.Add(time.Second)
	stdlog.Print("three")
	type record struct {
		Level, Msg string
		NotLogged  int `json:"not_logged"`
	}
	var got []record
	for line := range strings.SplitSeq(strings.TrimSpace(buf.String()), "\n") {
		var r record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		got = append(got, r)
	}
	want := []record{{"WARN", "one", 0}, {"WARN", "three", 1}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("records %+v, want %+v", got, want)
	}
}
