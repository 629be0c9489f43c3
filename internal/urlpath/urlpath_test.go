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
	all := Options{FoldCase: true, StripParams: true}
	for _, tt := range []struct {
		in        string
		o         Options
		path, raw string
	}{
		{"/a/../login?x=1", Options{}, "/login", ""},
		{"//search/a%2Fb", Options{}, "/search/a/b", "/search/a%2Fb"},
		// Encoded unreserved characters are decoded before cleaning, as
		// NGINX, Apache and Tomcat do: %2e%2e is a .. segment.
		{"/x/%2e%2e/login", Options{}, "/login", ""},
		{"/x/%2E%2E/login", Options{}, "/login", ""},
		{"/%2e/login", Options{}, "/login", ""},
		{"/x/.%2e/login", Options{}, "/login", ""},
		{"/search/%2e/cats", Options{}, "/search/cats", ""},
		{"/%6Cogin", Options{}, "/login", ""},
		{"/%7Euser/a%2D%5F", Options{}, "/~user/a-_", ""},
		// Reserved ones are not: %2F stays within its segment, %25 is no %.
		{"/a%2Fb/%2e%2e/c", Options{}, "/c", ""},
		{"/a%2fb/%2e%2e", Options{}, "/", ""},
		{"/x/%252e%252e/login", Options{}, "/x/%2e%2e/login", ""},
		{"/login;jsessionid=1", Options{}, "/login;jsessionid=1", ""},
		{"/LOGIN", Options{}, "/LOGIN", ""},
		// Parameters are cut before dot segments are resolved.
		{"/login;jsessionid=1", Options{StripParams: true}, "/login", ""},
		{"/x/..;/login", Options{StripParams: true}, "/login", ""},
		{"/a;v=1/b;c/;", Options{StripParams: true}, "/a/b/", ""},
		{"/login%3Bx=1", Options{StripParams: true}, "/login;x=1", "/login%3Bx=1"},
		{"/LOGIN", Options{FoldCase: true}, "/login", ""},
		{"/%4Cogin/A%2Fb", Options{FoldCase: true}, "/login/a/b", "/login/a%2Fb"},
		{"/Caf%C3%A9", Options{FoldCase: true}, "/café", ""},
		{"/X/..;/%4COGIN;x", all, "/login", ""},
		// With DecodeSlash an escaped slash is one, decoded before dot
		// segments are resolved, as NGINX, gorilla/mux and gin read it.
		{"/api%2Fsecret", Options{DecodeSlash: true}, "/api/secret", ""},
		{"/users%2f7", Options{DecodeSlash: true}, "/users/7", ""},
		{"/x%2F..%2Flogin", Options{DecodeSlash: true}, "/login", ""},
		{"/a%252Fb", Options{DecodeSlash: true}, "/a%2Fb", ""},
		{"/X%2F..;%2F%4COGIN", Options{DecodeSlash: true, StripParams: true, FoldCase: true}, "/login", ""},
	} {
		u, err := url.ParseRequestURI(tt.in)
		if err != nil {
			t.Fatal(err)
		}
		got := CleanURL(u, tt.o)
		if got.Path != tt.path || got.RawPath != tt.raw || got.RawQuery != u.RawQuery {
			t.Errorf("CleanURL(%q, %+v) = path %q raw %q query %q, want %q %q %q", tt.in, tt.o, got.Path, got.RawPath, got.RawQuery, tt.path, tt.raw, u.RawQuery)
		}
	}
	// A path already in its form comes back as the same URL, without
	// allocating beyond what EscapedPath does: every request pays for the
	// checks alone.
	for _, in := range []string{"/login", "/api/", "/pkg.service/method", "/search?q=%2e", "/caf%C3%A9/a%2Fb"} {
		u, err := url.ParseRequestURI(in)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range []Options{{}, all} {
			base := testing.AllocsPerRun(100, func() { _ = u.EscapedPath() })
			if n := testing.AllocsPerRun(100, func() {
				if CleanURL(u, o) != u {
					t.Fatalf("CleanURL(%q, %+v) is not the URL itself", in, o)
				}
			}); n != base {
				t.Errorf("CleanURL(%q, %+v): %v allocations, want EscapedPath's %v", in, o, n, base)
			}
		}
	}
}

// FuzzCleanURL checks that CleanURL gives a path in its form, which stays
// so: CleanURL of its own result returns that result.
func FuzzCleanURL(f *testing.F) {
	for _, s := range []string{"/x/%2e%2e/login", "/a%2Fb/..;/c", "/%4C;x/%252e/", "//a/./b/"} {
		f.Add(s, true, true, true)
	}
	f.Fuzz(func(t *testing.T, in string, fold, strip, slash bool) {
		u, err := url.ParseRequestURI(in)
		if err != nil || u.Opaque != "" {
			return
		}
		o := Options{FoldCase: fold, StripParams: strip, DecodeSlash: slash}
		once := CleanURL(u, o)
		if twice := CleanURL(once, o); twice != once {
			t.Fatalf("CleanURL(%q) = %q, and again %q", in, once.EscapedPath(), twice.EscapedPath())
		}
		if p := once.EscapedPath(); decodeUnreserved(p) != p || fold && lowerASCII(p) != p {
			t.Fatalf("CleanURL(%q) = %q, not in its form", in, p)
		}
	})
}
