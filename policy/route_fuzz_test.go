package policy

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// The fuzz input is a few bytes, read as choices: each picks an entry of
// one of the tables below (modulo its length), or, for a segment of
// rawSegment, a length and that many bytes of rawBytes. Past the end of
// the input every choice is 0.
var (
	// fuzzPatternHosts are the hosts a pattern may name; "" names none.
	fuzzPatternHosts = []string{"", "", "example.com", "Example.com", "[::1]", "::1", "example.com:8080"}
	// fuzzPatternSegments are a pattern's segments: literals, some of
	// them escaped, empty (a double slash) or dots; {s<i>} and
	// {s<i>...} stand for wildcards named after their position.
	fuzzPatternSegments = []string{
		rawSegment, "{s}", "{s...}", "{$}", "a", "b", "A", "api", "", ".", "..", "%2e", "%2E%2E",
		"%2F", "a%2Fb", "%2f", "%41", "%20", "a%20b", "%zz", "a;p", "%7Bs%7D", "caf%C3%A9",
	}
	// fuzzRequestHosts are Host headers: with and without a port, in
	// other cases, IPv6 literals, empty.
	fuzzRequestHosts = []string{
		"example.com", "EXAMPLE.COM", "Example.com", "example.com:8080", "example.com.", "other.org",
		"[::1]", "[::1]:80", "::1", "",
	}
	// fuzzRequestSegments are a request path's segments.
	fuzzRequestSegments = []string{
		rawSegment, "a", "b", "A", "api", "x", "", ".", "..", "%2e", "%2E", "%2E%2E", "%2F", "a%2Fb", "%2f",
		"a%2fb", "%41", "%20", "a%20b", "%zz", "a;p=1", "%7Bs%7D", "caf%C3%A9", "caf%c3%a9", "{$}", "{s}",
	}
	fuzzMethods = []string{http.MethodGet, http.MethodHead, http.MethodConnect}
)

// rawSegment is the table entry that makes a segment of bytes of
// rawBytes rather than a table's, so that the fuzzer reaches literals no
// table lists: braces, dots and percent signs in any order.
const (
	rawSegment = "\x00raw"
	rawBytes   = "a.{}%2F$"
	rawMax     = 8
)

// routeCase is what a fuzz input stands for: the patterns of one
// policy's mux and a request.
type routeCase struct {
	patterns []string
	method   string
	host     string
	target   string // as a request line has it; "" for an empty path
}

// fuzzReader hands out an input's bytes as choices.
type fuzzReader struct{ b []byte }

func (r *fuzzReader) next() int {
	if len(r.b) == 0 {
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return int(c)
}

// segment reads a segment from table; in a pattern (named), a wildcard
// is named for its position i, so that no two in one pattern share a
// name.
func (r *fuzzReader) segment(table []string, i int, named bool) string {
	seg := table[r.next()%len(table)]
	switch {
	case seg == rawSegment:
		raw := make([]byte, 1+r.next()%rawMax)
		for j := range raw {
			raw[j] = rawBytes[r.next()%len(rawBytes)]
		}
		return string(raw)
	case named && seg == "{s}":
		return fmt.Sprintf("{s%d}", i)
	case named && seg == "{s...}":
		return fmt.Sprintf("{s%d...}", i)
	}
	return seg
}

// decodeRouteCase reads a routeCase from data:
//
//	patterns-1
//	per pattern: host, segments (low 3 bits, mod 5) | 0x80 for a final slash, segments
//	method, host, segments (low 3 bits, mod 6) | 0x80 for a final slash | 0x40 for the absolute form, segments
//
// A request of no segments and no final slash has the empty path.
func decodeRouteCase(data []byte) routeCase {
	r := &fuzzReader{b: data}
	var c routeCase
	for range 1 + r.next()%4 {
		host := fuzzPatternHosts[r.next()%len(fuzzPatternHosts)]
		shape := r.next()
		var b strings.Builder
		b.WriteString(host)
		for i := range shape & 7 % 5 {
			b.WriteString("/" + r.segment(fuzzPatternSegments, i, true))
		}
		if shape&0x80 != 0 || b.Len() == len(host) {
			b.WriteString("/")
		}
		c.patterns = append(c.patterns, b.String())
	}
	c.method = fuzzMethods[r.next()%len(fuzzMethods)]
	c.host = fuzzRequestHosts[r.next()%len(fuzzRequestHosts)]
	shape := r.next()
	var b strings.Builder
	if shape&0x40 != 0 {
		b.WriteString("http://other.org")
	}
	n := shape & 7 % 6
	for i := range n {
		b.WriteString("/" + r.segment(fuzzRequestSegments, i, false))
	}
	if shape&0x80 != 0 || shape&0x40 != 0 && n == 0 {
		b.WriteString("/")
	}
	c.target = b.String()
	return c
}

// encodeRouteCase is decodeRouteCase's inverse, so that the seed corpus
// is written as patterns and requests: wildcards must be named s<i> for
// their position i, and an absolute target start with http://other.org.
func encodeRouteCase(c routeCase) ([]byte, error) {
	var out []byte
	index := func(table []string, s string) (int, error) {
		if i := slices.Index(table, s); i >= 0 {
			return i, nil
		}
		return 0, fmt.Errorf("%q is in no table", s)
	}
	segments := func(table []string, segs []string, named bool) error {
		for i, seg := range segs {
			key := seg
			switch {
			case named && seg == fmt.Sprintf("{s%d}", i):
				key = "{s}"
			case named && seg == fmt.Sprintf("{s%d...}", i):
				key = "{s...}"
			case named && (seg == "{s}" || seg == "{s...}"):
				return fmt.Errorf("wildcard %q is not named s%d", seg, i)
			}
			if j := slices.Index(table, key); j >= 0 {
				out = append(out, byte(j))
				continue
			}
			if seg == "" || len(seg) > rawMax || strings.Trim(seg, rawBytes) != "" {
				return fmt.Errorf("segment %q is in no table and not raw", seg)
			}
			out = append(out, byte(slices.Index(table, rawSegment)), byte(len(seg)-1))
			for _, ch := range []byte(seg) {
				out = append(out, byte(strings.IndexByte(rawBytes, ch)))
			}
		}
		return nil
	}
	// split cuts a path into its segments and whether it has a final slash.
	split := func(p string) ([]string, bool) {
		if p == "" || p == "/" {
			return nil, p == "/"
		}
		segs := strings.Split(p[1:], "/")
		if segs[len(segs)-1] == "" {
			return segs[:len(segs)-1], true
		}
		return segs, false
	}
	if len(c.patterns) < 1 || len(c.patterns) > 4 {
		return nil, fmt.Errorf("%d patterns, want 1 to 4", len(c.patterns))
	}
	out = append(out, byte(len(c.patterns)-1))
	for _, p := range c.patterns {
		i := strings.IndexByte(p, '/')
		if i < 0 {
			return nil, fmt.Errorf("pattern %q has no path", p)
		}
		h, err := index(fuzzPatternHosts, p[:i])
		if err != nil {
			return nil, err
		}
		segs, slash := split(p[i:])
		shape := byte(len(segs))
		if slash {
			shape |= 0x80
		}
		out = append(out, byte(h), shape)
		if err := segments(fuzzPatternSegments, segs, true); err != nil {
			return nil, err
		}
	}
	m, err := index(fuzzMethods, c.method)
	if err != nil {
		return nil, err
	}
	h, err := index(fuzzRequestHosts, c.host)
	if err != nil {
		return nil, err
	}
	target, abs := strings.CutPrefix(c.target, "http://other.org")
	segs, slash := split(target)
	shape := byte(len(segs))
	if slash {
		shape |= 0x80
	}
	if abs {
		shape |= 0x40
	}
	out = append(out, byte(m), byte(h), shape)
	if err := segments(fuzzRequestSegments, segs, false); err != nil {
		return nil, err
	}
	return out, nil
}

// routeSeeds are the cases plain go test runs: the ones where the tree
// has to read a pattern or a path as ServeMux does, or follow its
// preferences and redirects.
var routeSeeds = []routeCase{
	{[]string{"/"}, "GET", "example.com", "/"},
	{[]string{"/"}, "GET", "example.com", ""},
	{[]string{"/"}, "CONNECT", "example.com:8080", ""},
	{[]string{"/a/"}, "GET", "example.com", "/a"},
	{[]string{"/a/"}, "CONNECT", "example.com", "/a"},
	{[]string{"/a/{s1}"}, "GET", "example.com", "/a/"},
	{[]string{"/a/{s1...}"}, "HEAD", "example.com", "/a"},
	{[]string{"/a/{s1...}", "/a/b"}, "GET", "example.com", "/a/b/"},
	{[]string{"/a/{$}"}, "GET", "example.com", "/a/"},
	{[]string{"/a/{$}"}, "GET", "example.com", "/a"},
	{[]string{"/{s0}/b/", "/a/{s1}"}, "GET", "example.com", "/a/b"},
	{[]string{"/a//b"}, "GET", "example.com", "/a/x/b"},
	{[]string{"/a//b", "/a/{s1}/b"}, "GET", "example.com", "/a/x/b"},
	{[]string{"/a/%2F"}, "GET", "example.com", "/a/%2F"},
	{[]string{"/a/%2F/b"}, "GET", "example.com", "/a/%2f/b"},
	{[]string{"/{s0}"}, "GET", "example.com", "/%2F"},
	{[]string{"/a%2Fb"}, "GET", "example.com", "/a/b"},
	{[]string{"/a%2Fb"}, "GET", "example.com", "/a%2fb"},
	{[]string{"/%2e"}, "GET", "example.com", "/%2E"},
	{[]string{"/.."}, "GET", "example.com", "/%2E%2E"},
	{[]string{"/.."}, "GET", "example.com", "/.."},
	{[]string{"/%41"}, "GET", "example.com", "/A"},
	{[]string{"/%zz/"}, "GET", "example.com", "/%zz"},
	{[]string{"/a%20b"}, "GET", "example.com", "/a%20b"},
	{[]string{"/caf%C3%A9"}, "GET", "example.com", "/caf%c3%a9"},
	{[]string{"/%7Bs%7D"}, "GET", "example.com", "/{s}"},
	{[]string{"/a.{}"}, "GET", "example.com", "/a.{}"},
	{[]string{"example.com/a"}, "GET", "EXAMPLE.COM", "/a"},
	{[]string{"example.com/a", "/a/"}, "GET", "example.com:8080", "/a"},
	{[]string{"Example.com/", "/a"}, "GET", "Example.com", "/a"},
	{[]string{"example.com/a/", "/a"}, "GET", "example.com.", "/a"},
	{[]string{"[::1]/a"}, "GET", "[::1]:80", "/a"},
	{[]string{"[::1]/a"}, "GET", "[::1]", "/a"},
	{[]string{"::1/a"}, "GET", "::1", "/a"},
	{[]string{"::1/a"}, "GET", "[::1]:80", "/a"},
	{[]string{"example.com:8080/"}, "GET", "example.com:8080", "/a"},
	{[]string{"/a/b"}, "GET", "example.com", "http://other.org/a/b"},
	{[]string{"/"}, "CONNECT", "example.com", "http://other.org/"},
}

// FuzzRouteMatchesServeMux checks the routing tree against the mux it is
// built beside: for any patterns the mux accepts together and any
// request, a policy's matcher routes the request to the policy exactly
// when the mux's Handler answers with the policy's marker.
func FuzzRouteMatchesServeMux(f *testing.F) {
	for _, c := range routeSeeds {
		data, err := encodeRouteCase(c)
		if err != nil {
			f.Fatalf("seed %q: %v", c, err)
		}
		if got := decodeRouteCase(data); !slices.Equal(got.patterns, c.patterns) ||
			got.method != c.method || got.host != c.host || got.target != c.target {
			f.Fatalf("seed %q reads back as %q", c, got)
		}
		f.Add(data)
	}
	// The seeds are a test only if the mux takes most of their patterns,
	// and routes some of their requests to the policy and some not.
	routed, missed := 0, 0
	for _, c := range routeSeeds {
		if checked, want := checkRoute(f, c); checked && want {
			routed++
		} else if checked {
			missed++
		}
	}
	if routed < 10 || missed < 10 {
		f.Errorf("seeds: %d requests routed to the policy, %d not: want 10 or more of each", routed, missed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkRoute(t, decodeRouteCase(data))
	})
}

// checkRoute compares the matcher's verdict on c's request with the
// mux's, want, reporting whether c was a case at all: patterns the mux
// refuses, alone or together, and targets no server would parse are not.
func checkRoute(t testing.TB, c routeCase) (checked, want bool) {
	t.Helper()
	mux, mk, err := newMux(c.patterns...)
	if err != nil {
		return false, false
	}
	var u *url.URL
	if c.target == "" {
		u = &url.URL{}
	} else if u, err = url.ParseRequestURI(c.target); err != nil {
		return false, false
	}
	hr := &http.Request{Method: c.method, URL: u, Host: c.host, Header: http.Header{}}
	h, _ := mux.Handler(hr)
	want = h == http.Handler(mk)
	m := &matcher{mux: mux, marker: mk, pattern: c.patterns[0]}
	var rt route
	rt.reset(hr)
	if got := m.matches(&Request{HTTP: hr, Header: hr.Header}, &rt); got != want {
		t.Errorf("patterns %q (routing tree %v), %s %q (host %q): matches %v, ServeMux %v",
			c.patterns, mk.tree, c.method, c.target, c.host, got, want)
	}
	return true, want
}

// A segment that ends like a {name...} wildcard but does not start with
// a brace is a literal to ServeMux: "/...}" routes only the path /...},
// not, as a subtree would, every path.
func TestRouteLiteralEndingLikeMultiWildcard(t *testing.T) {
	for _, c := range []routeCase{
		{[]string{"/...}"}, "GET", "::1", "/a"},
		{[]string{"/...}"}, "GET", "example.com", "/...}"},
		{[]string{"/a/x...}"}, "GET", "example.com", "/a/b/c"},
		{[]string{"/a/x...}"}, "GET", "example.com", "/a/x...}"},
		{[]string{"/a/x...}", "/a/{s1...}"}, "GET", "example.com", "/a/b"},
	} {
		if checked, _ := checkRoute(t, c); !checked {
			t.Errorf("%q: ServeMux refused the case", c)
		}
	}
}
