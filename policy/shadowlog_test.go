package policy

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/rate/ratetest"
	"github.com/sluicehq/sluice/store/memory"
)

// A shadow policy's refusal is logged without the values of its key: a
// key of an API key header held the client's secret, written to the log
// in plain text. The line names the key by a hash, and the retry after
// as a duration's text, as other lines write durations.
func TestShadowRefusalLogHidesTheKey(t *testing.T) {
	var buf bytes.Buffer
	clock := ratetest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	e := generation(t, `
policies:
  - {name: perkey, shadow: true, key: "header:X-Api-Key", limits: ["1/h"]}
`, memory.New(memory.Options{Clock: clock}), clock, Options{Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
	for range 2 {
		sendFrom(e, "GET", "/", "192.0.2.1", "X-Api-Key", "pk_secret_abc")
	}
	line := buf.String()
	if !strings.Contains(line, "shadow policy would refuse") {
		t.Fatalf("no refusal logged:\n%s", line)
	}
	if strings.Contains(line, "pk_secret_abc") {
		t.Errorf("the log holds the API key:\n%s", line)
	}
	if !strings.Contains(line, `"key_hash":"`) || !strings.Contains(line, `"retry_after":"1h0m0s"`) {
		t.Errorf("want the key's hash and retry_after as a duration's text:\n%s", line)
	}
}
