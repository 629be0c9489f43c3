package urlpath

import (
	"net/url"
	"testing"
)

func TestClean(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"", "/"},
		{"/", "/"},
		{"/login", "/login"},
		{"login", "/login"},
		{"//login", "/login"},
		{"/a/../login", "/login"},
		{"/./login", "/login"},
		{"/api/", "/api/"},
		{"/api//", "/api/"},
		{"/api/./", "/api/"},
		{"/../", "/"},
		{"/pkg.Svc//M", "/pkg.Svc/M"},
	} {
		if got := Clean(tt.in); got != tt.want {
			t.Errorf("Clean(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	// A clean path comes back as it is, without allocating: every request
	// with a clean path pays for the check alone.
	for _, p := range []string{"/login", "/api/", "/pkg.Service/Method"} {
		if n := testing.AllocsPerRun(100, func() { _ = Clean(p) }); n != 0 {
			t.Errorf("Clean(%q): %v allocations, want 0", p, n)
		}
	}
}

func TestCleanURL(t *testing.T) {
	for _, tt := range []struct{ in, path, raw string }{
		{"/a/../login?x=1", "/login", ""},
		{"//search/a%2Fb", "/search/a/b", "/search/a%2Fb"},
		{"/search/%2e/cats", "/search/./cats", "/search/%2e/cats"}, // %2e is a segment, as in ServeMux
	} {
		u, err := url.ParseRequestURI(tt.in)
		if err != nil {
			t.Fatal(err)
		}
		got := CleanURL(u)
		if got.Path != tt.path || got.RawPath != tt.raw || got.RawQuery != u.RawQuery {
			t.Errorf("CleanURL(%q) = path %q raw %q query %q, want %q %q %q", tt.in, got.Path, got.RawPath, got.RawQuery, tt.path, tt.raw, u.RawQuery)
		}
	}
	u, _ := url.ParseRequestURI("/login")
	if CleanURL(u) != u {
		t.Error("CleanURL of a clean URL is not the URL itself")
	}
}
