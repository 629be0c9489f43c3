package dashboard

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/sim"
)

// Defaults of the zero Options.
const (
	// DefaultWindow is how long live decisions are kept.
	DefaultWindow = 5 * time.Minute
	// MaxWindow is the longest Options.Window may be.
	MaxWindow = time.Hour
	// DefaultMaxPolicies is how many live rows there are at most, Other's
	// included: 255 policies get a row of their own.
	DefaultMaxPolicies = 256
	// DefaultMaxBody is the largest request body POST api/sim reads.
	DefaultMaxBody = 1 << 20
	// DefaultTimeout bounds one simulation.
	DefaultTimeout = 10 * time.Second
	// DefaultMaxRunning is how many simulations may run at once.
	DefaultMaxRunning = 2
)

// Options configure a [Dashboard]. The zero value is ready to use: every
// field documents what its zero value means.
type Options struct {
	// Clock tells the time of live decisions. Nil means rate.SystemClock.
	Clock rate.Clock
	// Window is how long live decisions are kept, rounded up to whole
	// seconds, at most MaxWindow. Zero means DefaultWindow.
	Window time.Duration
	// MaxPolicies bounds the live rows, Other's included: the first
	// MaxPolicies-1 policies (of those that decided in the window) get a
	// row of their own, the decisions of any more are counted under
	// Other. Zero means DefaultMaxPolicies.
	MaxPolicies int
	// MaxBody is the largest request body POST api/sim reads, in bytes;
	// a larger one is answered 413. Zero means DefaultMaxBody.
	MaxBody int64
	// Timeout bounds one simulation; one that takes longer is answered
	// 503. It also bounds how long the request's body takes to arrive
	// (408 beyond) and how long the client takes to read the answer.
	// Zero means DefaultTimeout.
	Timeout time.Duration
	// MaxRunning is how many simulations may run at once; a request
	// beyond it is answered 429 with Retry-After. Zero means
	// DefaultMaxRunning.
	MaxRunning int
	// NoPlayground turns the playground off: POST api/sim answers 403,
	// and the page says how to turn it on. A simulation may take a core
	// for Timeout, so a server whose admin listener others can reach (a
	// scraper's network) need not run anyone's.
	NoPlayground bool
	// Logger receives the handler's log records. Nil means none.
	Logger *slog.Logger
}

// Dashboard is the web page of a sluice server and its API: live
// decisions per policy, and a playground that runs package sim's
// simulations. It is an [http.Handler]; mount it on the admin listener,
// at its root or under a prefix with [http.StripPrefix] (the page uses
// relative links). Call [Dashboard.Record] for every decision of an
// enforcing policy, [Dashboard.RecordShadow] for a shadow policy's.
//
// Make one with [New]; the zero value is not usable. It is safe for
// concurrent use.
type Dashboard struct {
	handler http.Handler
	clock   rate.Clock
	live    *live
	maxBody int64
	timeout time.Duration
	running chan struct{} // one token per running simulation
	// noPlayground turns POST api/sim off (Options.NoPlayground).
	noPlayground bool
	log          *slog.Logger
	page         []byte            // the rendered index page
	pageTag      string            // its ETag
	static       fs.FS             // web/static
	staticTags   map[string]string // ETag by file name in static
	infos        []ScenarioInfo
}

//go:embed web
var webFS embed.FS

// New returns a dashboard with opts.
func New(opts Options) *Dashboard {
	d := &Dashboard{
		clock:   opts.Clock,
		maxBody: opts.MaxBody,
		timeout: opts.Timeout,
		log:     opts.Logger,
		infos:   scenarios(),

		noPlayground: opts.NoPlayground,
	}
	if d.clock == nil {
		d.clock = rate.SystemClock{}
	}
	if d.maxBody <= 0 {
		d.maxBody = DefaultMaxBody
	}
	if d.timeout <= 0 {
		d.timeout = DefaultTimeout
	}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	window := opts.Window
	if window <= 0 {
		window = DefaultWindow
	}
	window = min(window, MaxWindow)
	maxPolicies := opts.MaxPolicies
	if maxPolicies <= 0 {
		maxPolicies = DefaultMaxPolicies
	}
	running := opts.MaxRunning
	if running <= 0 {
		running = DefaultMaxRunning
	}
	d.running = make(chan struct{}, running)
	d.live = newLive(int((window+time.Second-1)/time.Second), maxPolicies)
	d.page = d.renderPage()
	d.pageTag = etag(d.page)

	static, err := fs.Sub(webFS, "web/static")
	if err != nil {
		panic(err) // the embedded tree is part of the binary
	}
	d.static = static
	d.staticTags = map[string]string{}
	files, err := fs.ReadDir(static, ".")
	if err != nil {
		panic(err)
	}
	for _, f := range files {
		b, err := fs.ReadFile(static, f.Name())
		if err != nil {
			panic(err)
		}
		d.staticTags[f.Name()] = etag(b)
	}

	mux := http.NewServeMux()
	for _, rt := range []struct {
		method, path string
		serve        http.HandlerFunc
	}{
		{http.MethodGet, "/{$}", d.servePage},
		{http.MethodGet, "/static/{file}", d.serveStatic},
		{http.MethodGet, "/api/live", d.serveLive},
		{http.MethodGet, "/api/live.svg", d.serveLiveSVG},
		{http.MethodGet, "/api/scenarios", d.serveScenarios},
		{http.MethodPost, "/api/sim", d.serveSim},
	} {
		mux.HandleFunc(rt.method+" "+rt.path, rt.serve)
		// The path with any other method. The mux would answer 405 by
		// itself, but in plain text.
		allow := rt.method
		if allow == http.MethodGet {
			allow = "GET, HEAD"
		}
		mux.HandleFunc(rt.path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			writeProblem(w, newProblem(http.StatusMethodNotAllowed, "",
				fmt.Sprintf("method %s: this endpoint answers %s", r.Method, allow)).p)
		})
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, newProblem(http.StatusNotFound, "", "no such page or endpoint").p)
	})
	// The playground is the one endpoint that costs: refuse it to pages
	// of other origins, which could otherwise make a visitor's browser
	// run simulations.
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, newProblem(http.StatusForbidden, "",
			"refused a request from a page of another origin; use the dashboard's own page").p)
	}))
	d.handler = cop.Handler(mux)
	return d
}

// etag returns a strong ETag for b: the start of its SHA-256, quoted.
func etag(b []byte) string {
	sum := sha256.Sum256(b)
	return `"` + hex.EncodeToString(sum[:12]) + `"`
}

// ServeHTTP serves the page and the API:
//
//	GET  /                 the page
//	GET  /static/…         its script, style sheet and icon
//	GET  /api/live         live decisions per policy as JSON (see Live); ?seconds=N for the last N
//	GET  /api/live.svg     the same, drawn
//	GET  /api/scenarios    the built-in scenarios (see ScenarioInfo)
//	POST /api/sim          run a simulation (see SimRequest and SimResponse)
//
// Errors are application/problem+json (see Problem). Every response
// carries a Content-Security-Policy that allows only the dashboard's own
// script and style sheet.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	d.handler.ServeHTTP(w, r)
}

// Record counts one decision of policy: allowed or refused. It is cheap
// (no allocation once the policy has been seen) and safe for concurrent
// use; call it for every decision. Beyond Options.MaxPolicies-1 policies
// with rows of their own, decisions are counted under Other.
//
// A row counts what its policy decided, not what the client got: a
// request this policy allowed and another refused is recorded here as
// allowed (see [Live]).
func (d *Dashboard) Record(policy string, allowed bool) {
	v := refused
	if allowed {
		v = passed
	}
	d.live.record(policy, v, d.clock.Now().Unix())
}

// RecordShadow counts one decision of a shadow policy, which refuses
// nothing: the request passed, and allowed says whether the policy would
// have let it through had it enforced. A would-be refusal counts as
// passed and apart, in ShadowRefused (see [LivePolicy]), not as refused:
// the row then shows what the policy would refuse while its refused share
// stays what clients got. It is as cheap as Record.
func (d *Dashboard) RecordShadow(policy string, allowed bool) {
	v := shadowRefused
	if allowed {
		v = passed
	}
	d.live.record(policy, v, d.clock.Now().Unix())
}

// Live returns the decisions of the last seconds, up to the current one;
// seconds outside 1 to the window mean the whole window.
func (d *Dashboard) Live(seconds int) Live {
	return d.live.snapshot(d.clock.Now().Unix(), seconds)
}

// liveSeconds reads ?seconds=N.
func (d *Dashboard) liveSeconds(r *http.Request) (int, error) {
	s := r.URL.Query().Get("seconds")
	if s == "" {
		return d.live.window, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > d.live.window {
		return 0, newProblem(http.StatusBadRequest, "seconds",
			fmt.Sprintf("seconds=%q: want a whole number from 1 to %d, the window", s, d.live.window))
	}
	return n, nil
}

// serveLive is GET api/live.
func (d *Dashboard) serveLive(w http.ResponseWriter, r *http.Request) {
	n, err := d.liveSeconds(r)
	if err != nil {
		d.fail(w, r, err)
		return
	}
	d.writeJSON(w, r, d.Live(n))
}

// serveLiveSVG is GET api/live.svg.
func (d *Dashboard) serveLiveSVG(w http.ResponseWriter, r *http.Request) {
	n, err := d.liveSeconds(r)
	if err != nil {
		d.fail(w, r, err)
		return
	}
	var b bytes.Buffer
	if err := writeLiveSVG(&b, d.Live(n)); err != nil {
		d.fail(w, r, fmt.Errorf("drawing live decisions: %w", err))
		return
	}
	w.Header().Set("Content-Type", "image/svg+xml; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(b.Bytes())
}

// serveScenarios is GET api/scenarios.
func (d *Dashboard) serveScenarios(w http.ResponseWriter, r *http.Request) {
	d.writeJSON(w, r, d.infos)
}

// servePage is GET /. The page and its assets are revalidated at every
// load (no-cache), which their ETags answer with a 304 while they have
// not changed.
func (d *Dashboard) servePage(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("ETag", d.pageTag)
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(d.page))
}

// serveStatic is GET static/{file}: one file by name, no folder listing.
func (d *Dashboard) serveStatic(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("file")
	tag, ok := d.staticTags[name]
	if !ok {
		writeProblem(w, newProblem(http.StatusNotFound, "", fmt.Sprintf("no static file %q", name)).p)
		return
	}
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("ETag", tag)
	http.ServeFileFS(w, r, d.static, name)
}

// pageData is what the page template shows.
type pageData struct {
	Scenarios  []ScenarioInfo
	Algorithms []rate.Algorithm
	Setups     []sim.Setup
	Playground bool  // the playground runs simulations
	Window     int   // seconds of live data kept
	Spans      []int // the live spans offered, in seconds
	MaxBody    string
	MaxInst    int
	MaxSecs    int
	DefInst    int
}

var pageTemplate = template.Must(template.New("index.html").Funcs(template.FuncMap{
	"join":      strings.Join,
	"spanLabel": spanLabel,
	"setupHint": setupHint,
}).ParseFS(webFS, "web/index.html"))

// spanLabel names a span of seconds for a menu: "1 minute", "5 minutes",
// "90 seconds".
func spanLabel(seconds int) string {
	switch {
	case seconds == 60:
		return "1 minute"
	case seconds%60 == 0:
		return fmt.Sprintf("%d minutes", seconds/60)
	}
	return fmt.Sprintf("%d seconds", seconds)
}

// setupHint says in a few words what a setup is.
func setupHint(s sim.Setup) string {
	switch s {
	case sim.OwnCounters:
		return "instances, each its own counter"
	case sim.SharedCounter:
		return "instances, one shared counter"
	}
	return "one limiter"
}

// renderPage renders the page once: it depends only on the options.
func (d *Dashboard) renderPage() []byte {
	data := pageData{
		Playground: !d.noPlayground,
		Scenarios:  d.infos,
		Algorithms: rate.Algorithms(),
		Setups:     sim.Setups(),
		Window:     d.live.window,
		MaxBody:    sizeText(d.maxBody),
		MaxInst:    sim.MaxInstances,
		MaxSecs:    sim.MaxSeconds,
		DefInst:    sim.DefaultInstances,
	}
	for _, s := range []int{60, 300, 900, 3600} {
		if s <= d.live.window {
			data.Spans = append(data.Spans, s)
		}
	}
	if len(data.Spans) == 0 || data.Spans[len(data.Spans)-1] != d.live.window {
		data.Spans = append(data.Spans, d.live.window)
	}
	var b bytes.Buffer
	if err := pageTemplate.Execute(&b, data); err != nil {
		panic(err) // the template and its data are fixed: a failure is a bug
	}
	return b.Bytes()
}

// writeJSON sends v as JSON.
func (d *Dashboard) writeJSON(w http.ResponseWriter, r *http.Request, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		d.fail(w, r, fmt.Errorf("encoding the response: %w", err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(append(b, '\n'))
}

// fail answers err: its problem if it has one, else 500, logged.
func (d *Dashboard) fail(w http.ResponseWriter, r *http.Request, err error) {
	if p, ok := errors.AsType[*problem](err); ok {
		writeProblem(w, p.p)
		return
	}
	d.log.ErrorContext(r.Context(), "dashboard", "path", r.URL.Path, "error", err)
	writeProblem(w, newProblem(http.StatusInternalServerError, "", "internal error; the server's log says more").p)
}
