package dashboard_test

// A small client of the Chrome DevTools Protocol, enough to drive headless
// Chromium from a Go test: no Node, no third-party module. Chromium speaks
// the protocol over two pipes (--remote-debugging-pipe): it reads
// NUL-terminated JSON commands on fd 3 and writes NUL-terminated JSON
// replies and events on fd 4. One browser, one page, one session.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// chromiumNames are the names Debian, Ubuntu and Google give the browser.
var chromiumNames = []string{"chromium", "chromium-browser", "google-chrome-stable", "google-chrome"}

// findChromium returns the browser to run: $SLUICE_CHROMIUM, or the first
// of chromiumNames on PATH. It fails the test if there is none: the suite
// runs where Chromium is installed, and a skipped browser test would hide
// that the page is untested.
func findChromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("SLUICE_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range chromiumNames {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatalf("no Chromium on PATH (looked for %s): run `make deps`, which installs the Debian package chromium, or set SLUICE_CHROMIUM to a Chrome or Chromium binary", strings.Join(chromiumNames, ", "))
	return ""
}

// cdpMessage is a reply or an event.
type cdpMessage struct {
	ID        int64           `json:"id,omitempty"`
	Method    string          `json:"method,omitempty"`
	Params    json.RawMessage `json:"params,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	SessionID string          `json:"sessionId,omitempty"`
	Error     *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

// browser is a running headless Chromium and a session on its one page.
type browser struct {
	t       *testing.T
	cmd     *exec.Cmd
	in      *os.File // Chromium's fd 3
	stderr  syncBuffer
	session string
	closed  chan struct{} // closed when fd 4 ends

	mu      sync.Mutex
	nextID  int64
	pending map[int64]chan cdpMessage
	events  []cdpMessage
}

// startBrowser runs headless Chromium with a fresh profile, attaches to
// its page and sets the viewport. Cleanup closes it.
func startBrowser(t *testing.T, width, height int) *browser {
	t.Helper()
	bin := findChromium(t)
	profile := t.TempDir()
	toChrome, chromeIn, err := os.Pipe() // Chromium reads toChrome as fd 3
	if err != nil {
		t.Fatal(err)
	}
	chromeOut, fromChrome, err := os.Pipe() // Chromium writes fromChrome as fd 4
	if err != nil {
		t.Fatal(err)
	}
	b := &browser{t: t, in: chromeIn, pending: map[int64]chan cdpMessage{}, closed: make(chan struct{})}
	b.cmd = exec.Command(bin,
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-extensions", "--disable-default-apps", "--mute-audio", "--hide-scrollbars",
		"--user-data-dir="+profile, "--remote-debugging-pipe",
		fmt.Sprintf("--window-size=%d,%d", width, height), "about:blank")
	b.cmd.ExtraFiles = []*os.File{toChrome, fromChrome}
	b.cmd.Stderr = &b.stderr
	ownGroup(b.cmd) // its helpers end with it
	if err := b.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	toChrome.Close()
	fromChrome.Close()
	go b.read(chromeOut)
	t.Cleanup(b.close)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var targets struct {
		TargetInfos []struct {
			TargetID string `json:"targetId"`
			Type     string `json:"type"`
		} `json:"targetInfos"`
	}
	b.call(ctx, "", "Target.getTargets", nil, &targets)
	target := ""
	for _, ti := range targets.TargetInfos {
		if ti.Type == "page" {
			target = ti.TargetID
			break
		}
	}
	if target == "" {
		var created struct {
			TargetID string `json:"targetId"`
		}
		b.call(ctx, "", "Target.createTarget", map[string]any{"url": "about:blank"}, &created)
		target = created.TargetID
	}
	var attached struct {
		SessionID string `json:"sessionId"`
	}
	b.call(ctx, "", "Target.attachToTarget", map[string]any{"targetId": target, "flatten": true}, &attached)
	b.session = attached.SessionID
	for _, domain := range []string{"Page", "Runtime", "Log"} {
		b.call(ctx, b.session, domain+".enable", nil, nil)
	}
	b.call(ctx, b.session, "Emulation.setDeviceMetricsOverride", map[string]any{
		"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false,
	}, nil)
	return b
}

// read dispatches Chromium's messages until fd 4 ends.
func (b *browser) read(r io.ReadCloser) {
	defer close(b.closed)
	defer r.Close()
	br := bufio.NewReaderSize(r, 1<<20)
	for {
		frame, err := br.ReadBytes(0)
		if err != nil {
			return
		}
		var m cdpMessage
		if err := json.Unmarshal(frame[:len(frame)-1], &m); err != nil {
			continue
		}
		b.mu.Lock()
		if m.ID != 0 {
			if ch := b.pending[m.ID]; ch != nil {
				ch <- m
				delete(b.pending, m.ID)
			}
		} else {
			b.events = append(b.events, m)
		}
		b.mu.Unlock()
	}
}

// call sends a command and decodes its result into result (if not nil),
// failing the test on any error.
func (b *browser) call(ctx context.Context, session, method string, params, result any) {
	b.t.Helper()
	if err := b.try(ctx, session, method, params, result); err != nil {
		b.t.Fatalf("%v\nchromium's stderr:\n%s", err, b.stderrTail())
	}
}

// try is call returning its error.
func (b *browser) try(ctx context.Context, session, method string, params, result any) error {
	b.mu.Lock()
	b.nextID++
	id := b.nextID
	ch := make(chan cdpMessage, 1)
	b.pending[id] = ch
	b.mu.Unlock()
	msg := map[string]any{"id": id, "method": method}
	if params != nil {
		msg["params"] = params
	}
	if session != "" {
		msg["sessionId"] = session
	}
	frame, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	if _, err := b.in.Write(append(frame, 0)); err != nil {
		return fmt.Errorf("%s: writing to chromium: %w", method, err)
	}
	select {
	case m := <-ch:
		if m.Error != nil {
			return fmt.Errorf("%s: %s (%d)", method, m.Error.Message, m.Error.Code)
		}
		if result != nil {
			if err := json.Unmarshal(m.Result, result); err != nil {
				return fmt.Errorf("%s: decoding %s: %w", method, m.Result, err)
			}
		}
		return nil
	case <-b.closed:
		return fmt.Errorf("%s: chromium exited", method)
	case <-ctx.Done():
		return fmt.Errorf("%s: %w", method, ctx.Err())
	}
}

// navigate loads url in the page and waits for its load event.
func (b *browser) navigate(ctx context.Context, url string) {
	b.t.Helper()
	b.mu.Lock()
	seen := len(b.events)
	b.mu.Unlock()
	var nav struct {
		ErrorText string `json:"errorText"`
	}
	b.call(ctx, b.session, "Page.navigate", map[string]any{"url": url}, &nav)
	if nav.ErrorText != "" {
		b.t.Fatalf("loading %s: %s", url, nav.ErrorText)
	}
	for {
		b.mu.Lock()
		for _, m := range b.events[seen:] {
			if m.Method == "Page.loadEventFired" && m.SessionID == b.session {
				b.mu.Unlock()
				// The page may rewrite its query (history.replaceState),
				// not its path.
				path, _, _ := strings.Cut(url, "?")
				b.waitFor(ctx, `document.readyState === "complete" && location.href.split("?")[0] === `+jsString(path))
				return
			}
		}
		seen = len(b.events)
		b.mu.Unlock()
		select {
		case <-ctx.Done():
			b.t.Fatalf("loading %s: %v", url, ctx.Err())
		case <-b.closed:
			b.t.Fatalf("loading %s: chromium exited\n%s", url, b.stderrTail())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// eval evaluates a JavaScript expression in the page, awaiting it if it is
// a promise, and decodes its value into result (if not nil).
func (b *browser) eval(ctx context.Context, expr string, result any) {
	b.t.Helper()
	var out struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	b.call(ctx, b.session, "Runtime.evaluate", map[string]any{
		"expression": expr, "awaitPromise": true, "returnByValue": true,
	}, &out)
	if e := out.ExceptionDetails; e != nil {
		b.t.Fatalf("evaluating %s: %s %s", expr, e.Text, e.Exception.Description)
	}
	if result != nil {
		if err := json.Unmarshal(out.Result.Value, result); err != nil {
			b.t.Fatalf("evaluating %s: decoding %s: %v", expr, out.Result.Value, err)
		}
	}
}

// waitFor waits until a JavaScript condition holds in the page, polling
// it every 25 ms inside the page, for as long as ctx allows.
func (b *browser) waitFor(ctx context.Context, cond string) {
	b.t.Helper()
	// Give up inside the page a little before ctx does, so that a
	// timeout names the condition.
	ms := int64(10_000)
	if deadline, ok := ctx.Deadline(); ok {
		ms = min(ms, time.Until(deadline).Milliseconds()-500)
	}
	var held bool
	b.eval(ctx, fmt.Sprintf(`new Promise((resolve) => {
		const end = Date.now() + %d;
		const poll = () => {
			let ok = false;
			try { ok = !!(%s); } catch (e) {}
			if (ok || Date.now() > end) return resolve(ok);
			setTimeout(poll, 25);
		};
		poll();
	})`, ms, cond), &held)
	if !held {
		b.t.Fatalf("timed out waiting for %s", cond)
	}
}

// click clicks the middle of the element selector finds with the mouse,
// as a person would: the element must be visible and not covered.
func (b *browser) click(ctx context.Context, selector string) {
	b.t.Helper()
	var box struct{ X, Y float64 }
	b.eval(ctx, fmt.Sprintf(`(() => {
		const el = document.querySelector(%s);
		el.scrollIntoView({block: "center"});
		const r = el.getBoundingClientRect();
		return {X: r.left + r.width / 2, Y: r.top + r.height / 2};
	})()`, jsString(selector)), &box)
	var hit bool
	b.eval(ctx, fmt.Sprintf(`(() => {
		const el = document.querySelector(%s);
		const top = document.elementFromPoint(%f, %f);
		return top === el || el.contains(top);
	})()`, jsString(selector), box.X, box.Y), &hit)
	if !hit {
		b.t.Fatalf("%s is covered or off screen at (%.0f, %.0f)", selector, box.X, box.Y)
	}
	for _, typ := range []string{"mousePressed", "mouseReleased"} {
		b.call(ctx, b.session, "Input.dispatchMouseEvent", map[string]any{
			"type": typ, "x": box.X, "y": box.Y, "button": "left", "clickCount": 1,
		}, nil)
	}
}

// screenshot captures the whole page, as tall as its content, as PNG.
func (b *browser) screenshot(ctx context.Context, width int) []byte {
	b.t.Helper()
	var height float64
	b.eval(ctx, `document.documentElement.scrollHeight`, &height)
	var shot struct {
		Data string `json:"data"`
	}
	b.call(ctx, b.session, "Page.captureScreenshot", map[string]any{
		"format": "png", "captureBeyondViewport": true,
		"clip": map[string]any{"x": 0, "y": 0, "width": width, "height": height, "scale": 1},
	}, &shot)
	png, err := base64.StdEncoding.DecodeString(shot.Data)
	if err != nil {
		b.t.Fatalf("decoding the screenshot: %v", err)
	}
	return png
}

// problems returns what the page reported as errors: uncaught exceptions,
// console.error calls and error log entries (such as Content-Security-
// Policy violations and failed loads).
func (b *browser) problems() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, m := range b.events {
		switch m.Method {
		case "Runtime.exceptionThrown":
			var p struct {
				ExceptionDetails struct {
					Text      string `json:"text"`
					Exception struct {
						Description string `json:"description"`
					} `json:"exception"`
				} `json:"exceptionDetails"`
			}
			_ = json.Unmarshal(m.Params, &p)
			out = append(out, "exception: "+p.ExceptionDetails.Text+" "+p.ExceptionDetails.Exception.Description)
		case "Runtime.consoleAPICalled":
			var p struct {
				Type string `json:"type"`
				Args []struct {
					Value any `json:"value"`
				} `json:"args"`
			}
			_ = json.Unmarshal(m.Params, &p)
			if p.Type == "error" || p.Type == "assert" {
				out = append(out, fmt.Sprintf("console.%s: %v", p.Type, p.Args))
			}
		case "Log.entryAdded":
			var p struct {
				Entry struct {
					Source string `json:"source"`
					Level  string `json:"level"`
					Text   string `json:"text"`
					URL    string `json:"url"`
				} `json:"entry"`
			}
			_ = json.Unmarshal(m.Params, &p)
			if p.Entry.Level == "error" {
				out = append(out, fmt.Sprintf("%s: %s %s", p.Entry.Source, p.Entry.Text, p.Entry.URL))
			}
		}
	}
	return out
}

// close asks Chromium to quit, and kills its process group if it does not.
func (b *browser) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_ = b.try(ctx, "", "Browser.close", nil, nil)
	b.in.Close()
	done := make(chan error, 1)
	go func() { done <- b.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		killGroup(b.cmd)
		<-done
	}
}

// stderrTail returns the end of Chromium's stderr, for failure messages.
func (b *browser) stderrTail() string {
	s := b.stderr.String()
	if len(s) > 4000 {
		s = "…" + s[len(s)-4000:]
	}
	return s
}

// syncBuffer is a buffer safe to write and read at once: Chromium's stderr
// is copied into it while a failing test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	q, err := json.Marshal(s)
	if err != nil {
		panic(errors.New("unquotable string"))
	}
	return string(q)
}
