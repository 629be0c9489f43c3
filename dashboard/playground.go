package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/sim"
)

// SimRequest asks POST api/sim for a simulation. It is sent as JSON
// (Content-Type application/json, unknown fields refused) or as a form
// (application/x-www-form-urlencoded or multipart/form-data, the field
// names of the JSON; algorithms and setups repeated or, as in JSON,
// comma-separated; in a multipart form csv may be a file).
//
// Give Scenario or CSV. Every other field is optional: its zero value
// means the scenario's own.
type SimRequest struct {
	// Scenario names a built-in scenario of package sim: boundary,
	// calm-burst, flood, …; see GET api/scenarios.
	Scenario string `json:"scenario,omitempty"`
	// CSV is traffic in the form sim.ReadCSV reads: "time,key[,cost]" a
	// line, time in seconds from the start or RFC 3339. It needs Limit.
	CSV string `json:"csv,omitempty"`
	// Limit is the limit every algorithm applies, as in sluice's config:
	// "10 per 10s", "5/s", "100/m burst 20"; without an algorithm name.
	// Empty means the scenario's.
	Limit string `json:"limit,omitempty"`
	// Algorithms are the algorithms to compare, by name (fixed_window,
	// sliding_log, sliding_window, token_bucket, leaky_bucket, gcra). An
	// entry may hold several, comma-separated; "all", alone or among
	// them, means every one. Empty (or only blank names) means all. The
	// rule is sim.ParseNames', the one "sluice sim --algorithms" follows.
	Algorithms []string `json:"algorithms,omitempty"`
	// Setups are single, own-counters and shared-counter, read as
	// Algorithms are: "all", alone or among them, means every one. Empty
	// means the scenario's (single for pasted traffic).
	Setups []string `json:"setups,omitempty"`
	// Instances is how many instances own-counters and shared-counter
	// run, up to sim.MaxInstances. Zero means sim.DefaultInstances.
	Instances int `json:"instances,omitempty"`
	// Seconds is how long the scenario lasts, up to sim.MaxSeconds. Zero
	// means the scenario's.
	Seconds int `json:"seconds,omitempty"`
	// Seed picks the random arrivals of the scenarios that have them.
	// Zero means 1.
	Seed uint64 `json:"seed,omitempty"`
	// MaxDelay is how long a client waits rather than be refused, as a
	// policy's max_delay, written the same way: "500ms", "3s" (see
	// sim.Scenario.MaxDelay). Empty or "0" means no wait.
	MaxDelay string `json:"max_delay,omitempty"`
	// SVG asks for the picture in SimResponse.SVG.
	SVG bool `json:"svg,omitempty"`
}

// SimResponse is what POST api/sim returns as JSON: the fields of
// sim.Result's JSON form (scenario, results), what the scenario was, and
// the picture if asked for. A request whose Accept header asks for
// image/svg+xml and not JSON gets the picture alone.
type SimResponse struct {
	// Scenario is the scenario's name ("csv" for pasted traffic).
	Scenario string `json:"scenario"`
	// Summary says in one line what the traffic is.
	Summary string `json:"summary,omitempty"`
	// Description says what to look at and why, for a built-in scenario
	// as it comes. Its figures are the scenario's own: if the request
	// changes a setting they depend on, a last paragraph says which, by
	// the labels of the page's fields (Limit, Seconds, Max delay,
	// Instances, Setups), and Seed.
	Description string `json:"description,omitempty"`
	// Limit is the limit applied, such as "10 per 10s".
	Limit string `json:"limit"`
	// MaxDelay is the wait applied, such as "3s"; left out for none.
	MaxDelay string `json:"max_delay,omitempty"`
	// Seconds is how long the scenario lasts: the length of every
	// result's per_second.
	Seconds int `json:"seconds"`
	// Instances is how many instances own-counters and shared-counter ran.
	Instances int `json:"instances"`
	// Requests is how many requests the traffic holds.
	Requests int `json:"requests"`
	// Results holds one row per algorithm and setup, as in sim.Result:
	// each second's requests held back before they went ahead, and the
	// per-client totals of 2 to sim.MaxClients clients, with the rest.
	Results []sim.Row `json:"results"`
	// SVG is the picture sim.WriteSVG draws, if the request asked for it.
	SVG string `json:"svg,omitempty"`
}

// ScenarioInfo describes a built-in scenario, as GET api/scenarios lists
// them.
type ScenarioInfo struct {
	// Name is what SimRequest.Scenario names it by.
	Name string `json:"name"`
	// Summary says in one line what the traffic is.
	Summary string `json:"summary"`
	// Description says what to look at and why each algorithm decides as
	// it does.
	Description string `json:"description"`
	// Limit is the scenario's limit, such as "10 per 10s".
	Limit string `json:"limit"`
	// Seconds is how long the scenario lasts.
	Seconds int `json:"seconds"`
	// Setups are the setups it runs unless told otherwise.
	Setups []string `json:"setups"`
}

// scenarios lists the built-in scenarios as they come.
func scenarios() []ScenarioInfo {
	var out []ScenarioInfo
	for _, sc := range sim.Builtins(sim.Params{}) {
		info := ScenarioInfo{
			Name:        sc.Name,
			Summary:     sc.Summary,
			Description: sc.Description,
			Limit:       sc.Limit.RateString(),
			Seconds:     sc.Seconds,
			Setups:      []string{sim.Single.String()},
		}
		if len(sc.Setups) > 0 {
			info.Setups = info.Setups[:0]
			for _, s := range sc.Setups {
				info.Setups = append(info.Setups, s.String())
			}
		}
		out = append(out, info)
	}
	return out
}

// playgroundOff says why the playground does not run, and how to turn it
// on in sluice serve.
const playgroundOff = "the playground is off on this server; sluice serve --playground turns it on"

// serveSim is POST api/sim.
func (d *Dashboard) serveSim(w http.ResponseWriter, r *http.Request) {
	if d.noPlayground {
		writeProblem(w, newProblem(http.StatusForbidden, "", playgroundOff).p)
		return
	}
	// The admin listener bounds neither how long a body takes to arrive
	// nor how long a client takes to read the answer: the playground
	// does, by Timeout each, or a client that stops reading would keep
	// its place among MaxRunning (and the result in memory) for as long
	// as it keeps its connection open. Where the ResponseWriter does not
	// support deadlines, there are none.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(d.timeout))
	req, err := d.readSimRequest(w, r)
	if err != nil {
		// The deadline stays: before it answers, net/http reads what is
		// left of the body, which must not wait for good either.
		d.fail(w, r, err)
		return
	}
	// Past the body, a read is net/http's watch for the client hanging
	// up: a deadline firing there would cancel the simulation.
	_ = rc.SetReadDeadline(time.Time{})
	// Take a place once the body is read, so that a slow upload does not
	// hold one, but before the traffic is read into requests: they take
	// several times the memory of the body, and only MaxRunning requests
	// may hold them at once. The place is kept until the answer is
	// written, so that results waiting for a slow client count too.
	select {
	case d.running <- struct{}{}:
		defer func() { <-d.running }()
	default:
		w.Header().Set("Retry-After", "1")
		writeProblem(w, newProblem(http.StatusTooManyRequests, "",
			fmt.Sprintf("%d simulations are running already; try again in a second", cap(d.running))).p)
		return
	}
	sc, err := buildScenario(req)
	if err != nil {
		d.fail(w, r, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), d.timeout)
	defer cancel()
	res, err := sim.Run(ctx, sc)
	switch {
	case errors.Is(err, sim.ErrInvalid):
		p := newProblem(http.StatusBadRequest, "", err.Error())
		if le, ok := errors.AsType[*sim.LineError](err); ok {
			// A pasted request the scenario cannot hold: the page
			// selects its line, as for the CSV's own errors.
			p.p.Line = le.Line
		}
		d.fail(w, r, p)
		return
	case err != nil && r.Context().Err() != nil:
		// The client hung up: no one reads an answer, and it is no
		// error of the server's.
		d.log.DebugContext(r.Context(), "simulation abandoned by its client", "error", err)
		return
	case errors.Is(err, context.DeadlineExceeded):
		d.fail(w, r, newProblem(http.StatusServiceUnavailable, "",
			fmt.Sprintf("the simulation took longer than %v; try fewer requests, seconds or algorithms", d.timeout)))
		return
	case err != nil:
		d.fail(w, r, fmt.Errorf("simulation: %w", err))
		return
	}
	d.log.DebugContext(r.Context(), "simulation", "scenario", res.Scenario, "requests", len(sc.Events), "rows", len(res.Rows))
	_ = rc.SetWriteDeadline(time.Now().Add(d.timeout))

	if wantsSVG(r.Header.Get("Accept")) {
		w.Header().Set("Content-Type", "image/svg+xml; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if err := sim.WriteSVG(w, res); err != nil {
			d.log.WarnContext(r.Context(), "writing a simulation's picture", "error", err)
		}
		return
	}
	out := SimResponse{
		Scenario:    res.Scenario,
		Summary:     res.Summary,
		Description: res.Description,
		Limit:       res.Limit.RateString(),
		Seconds:     res.Seconds,
		Instances:   res.Instances,
		Requests:    len(sc.Events),
		Results:     res.Rows,
	}
	if res.MaxDelay > 0 {
		out.MaxDelay = res.MaxDelay.String()
	}
	if req.SVG {
		var b strings.Builder
		if err := sim.WriteSVG(&b, res); err != nil {
			d.fail(w, r, fmt.Errorf("drawing the simulation: %w", err))
			return
		}
		out.SVG = b.String()
	}
	d.writeJSON(w, r, out)
}

// wantsSVG reports whether an Accept header asks for SVG rather than
// JSON.
func wantsSVG(accept string) bool {
	return strings.Contains(accept, "image/svg+xml") && !strings.Contains(accept, "json")
}

// readSimRequest decodes the body of POST api/sim, at most d.maxBody
// bytes of it.
func (d *Dashboard) readSimRequest(w http.ResponseWriter, r *http.Request) (SimRequest, error) {
	var req SimRequest
	r.Body = http.MaxBytesReader(w, r.Body, d.maxBody)
	ct, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil && r.Header.Get("Content-Type") != "" {
		return req, newProblem(http.StatusUnsupportedMediaType, "", "unreadable Content-Type; send application/json or a form")
	}
	switch ct {
	case "application/json":
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			return req, d.bodyError(err, "JSON")
		}
		if _, err := dec.Token(); err != io.EOF {
			if err != nil {
				return req, d.bodyError(err, "JSON")
			}
			return req, newProblem(http.StatusBadRequest, "", "the body holds more than one JSON value")
		}
		return req, nil
	case "application/x-www-form-urlencoded", "multipart/form-data":
		if ct == "multipart/form-data" {
			err = r.ParseMultipartForm(d.maxBody)
		} else {
			err = r.ParseForm()
		}
		if err != nil {
			return req, d.bodyError(err, "form")
		}
		return formRequest(r)
	}
	return req, newProblem(http.StatusUnsupportedMediaType, "",
		fmt.Sprintf("Content-Type %q; send application/json, application/x-www-form-urlencoded or multipart/form-data", ct))
}

// bodyError turns an error reading the body into a problem: 413 if the
// body is over the limit.
func (d *Dashboard) bodyError(err error, what string) error {
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		return newProblem(http.StatusRequestEntityTooLarge, "",
			fmt.Sprintf("the body is larger than %s; paste less traffic", sizeText(d.maxBody)))
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return newProblem(http.StatusRequestTimeout, "",
			fmt.Sprintf("the body took longer than %v to arrive", d.timeout))
	}
	return newProblem(http.StatusBadRequest, "", fmt.Sprintf("unreadable %s: %v", what, err))
}

// formFields are the fields a form may hold. The page's form also sends
// source (which of scenario and csv to use) if its script did not run;
// it is ignored.
var formFields = []string{"scenario", "csv", "limit", "algorithms", "setups", "instances", "seconds", "seed", "max_delay", "svg", "source"}

// formRequest reads a SimRequest from a parsed form.
func formRequest(r *http.Request) (SimRequest, error) {
	var req SimRequest
	f := r.PostForm
	fields := slices.Collect(maps.Keys(f))
	if r.MultipartForm != nil {
		for k := range r.MultipartForm.File {
			fields = append(fields, k)
		}
	}
	for _, k := range fields {
		if !slices.Contains(formFields, k) {
			return req, newProblem(http.StatusBadRequest, k, fmt.Sprintf("unknown field %q (want %s)", k, strings.Join(formFields, ", ")))
		}
	}
	req.Scenario = strings.TrimSpace(f.Get("scenario"))
	req.CSV = f.Get("csv")
	if r.MultipartForm != nil && req.CSV == "" {
		if fhs := r.MultipartForm.File["csv"]; len(fhs) > 0 {
			file, err := fhs[0].Open()
			if err != nil {
				return req, fmt.Errorf("opening the uploaded csv: %w", err)
			}
			b, err := io.ReadAll(file)
			file.Close()
			if err != nil {
				return req, fmt.Errorf("reading the uploaded csv: %w", err)
			}
			req.CSV = string(b)
		}
	}
	req.Limit = strings.TrimSpace(f.Get("limit"))
	req.MaxDelay = strings.TrimSpace(f.Get("max_delay"))
	// Repeated or comma-separated, the lists are read as JSON's are, by
	// sim.ParseNames.
	req.Algorithms = f["algorithms"]
	req.Setups = f["setups"]
	var err error
	if req.Instances, err = formInt(f.Get("instances"), "instances"); err != nil {
		return req, err
	}
	if req.Seconds, err = formInt(f.Get("seconds"), "seconds"); err != nil {
		return req, err
	}
	if s := strings.TrimSpace(f.Get("seed")); s != "" {
		if req.Seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			return req, newProblem(http.StatusBadRequest, "seed", fmt.Sprintf("seed %q: want a whole number from 0", s))
		}
	}
	switch strings.TrimSpace(f.Get("svg")) {
	case "", "0", "false", "off":
	default:
		req.SVG = true
	}
	return req, nil
}

// formInt reads a whole number, empty meaning 0.
func formInt(s, field string) (int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, newProblem(http.StatusBadRequest, field, fmt.Sprintf("%s %q: want a whole number", field, s))
	}
	return n, nil
}

// buildScenario turns a request into the scenario to run, or a problem
// naming the field at fault.
func buildScenario(req SimRequest) (sim.Scenario, error) {
	bad := func(field, format string, args ...any) (sim.Scenario, error) {
		return sim.Scenario{}, newProblem(http.StatusBadRequest, field, fmt.Sprintf(format, args...))
	}
	switch {
	case req.Instances < 0 || req.Instances > sim.MaxInstances:
		return bad("instances", "instances must be between 1 and %d, got %d", sim.MaxInstances, req.Instances)
	case req.Seconds < 0 || req.Seconds > sim.MaxSeconds:
		return bad("seconds", "seconds must be between 1 and %d, got %d", sim.MaxSeconds, req.Seconds)
	}
	var sc sim.Scenario
	hasCSV := strings.TrimSpace(req.CSV) != ""
	switch {
	case req.Scenario != "" && hasCSV:
		return bad("csv", "give a scenario or csv traffic, not both")
	case hasCSV:
		if req.Limit == "" {
			return bad("limit", `traffic of your own needs a limit, such as "10 per 10s" or "100/m"`)
		}
		events, start, err := sim.ReadCSV(strings.NewReader(req.CSV))
		if le, ok := errors.AsType[*sim.LineError](err); ok {
			p := newProblem(http.StatusBadRequest, "csv", "csv "+le.Error())
			p.p.Line = le.Line
			return sim.Scenario{}, p
		}
		if err != nil {
			return bad("csv", "csv: %v", err)
		}
		keys := map[string]bool{}
		for _, e := range events {
			keys[e.Key] = true
		}
		sc = sim.Scenario{
			Name:    "csv",
			Summary: fmt.Sprintf("%d requests on %d key(s), pasted", len(events), len(keys)),
			Start:   start,
			Seconds: req.Seconds,
			Events:  events,
		}
	case req.Scenario != "":
		var err error
		sc, err = sim.Builtin(req.Scenario, sim.Params{Seconds: req.Seconds, Seed: req.Seed})
		if err != nil {
			return bad("scenario", "%v", err)
		}
	default:
		return bad("scenario", "choose a scenario or paste csv traffic")
	}
	if req.Limit != "" {
		l, err := sim.ParseLimit(req.Limit)
		if err != nil {
			return bad("limit", "%v", err)
		}
		sc.Limit = l
	}
	algs, err := sim.ParseNames(req.Algorithms, rate.Algorithms(), rate.ParseAlgorithm)
	if err != nil {
		return bad("algorithms", "algorithms: %v", err)
	}
	sc.Algorithms = algs // nil: every algorithm
	setups, err := sim.ParseNames(req.Setups, sim.Setups(), sim.ParseSetup)
	if err != nil {
		return bad("setups", "setups: %v", err)
	}
	if setups != nil {
		sc.Setups = setups
	}
	sc.Instances = req.Instances
	if s := strings.TrimSpace(req.MaxDelay); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return bad("max_delay", "max_delay %q: want a duration such as 500ms or 3s (0 for none)", s)
		}
		sc.MaxDelay = d
	}
	if req.Scenario != "" {
		sc = sim.NoteChanges(req.Scenario, sc, fieldLabel)
	}
	return sc, nil
}

// fieldLabel names each setting a built-in scenario's figures depend on
// as the page's form labels its field; the seed, which the form does not
// show, by the name of its field in a request.
var fieldLabel = map[sim.Setting]string{
	sim.SettingLimit:     "Limit",
	sim.SettingSeconds:   "Seconds",
	sim.SettingSeed:      "Seed",
	sim.SettingInstances: "Instances",
	sim.SettingSetups:    "Setups",
	sim.SettingMaxDelay:  "Max delay",
}

// sizeText formats a size in bytes: "1 MiB", "64 KiB", "100 bytes".
func sizeText(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}
