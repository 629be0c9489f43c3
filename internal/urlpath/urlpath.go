// Package urlpath cleans request paths as net/http's ServeMux does, so
// that a policy decides /a/../login, //login and /./login as the /login
// they mean. ServeMux answers an unclean path with a redirect to the clean
// one, which matches no policy; a reverse proxy, a gateway, a gRPC
// server's unknown-service handler or an application that cleans paths
// itself would serve the request as the clean path.
package urlpath

import (
	"net/url"
	"path"
	"strings"
)

// Clean returns the canonical path for p as ServeMux computes it: a
// leading slash, no empty, . or .. segments, and the trailing slash of p
// kept. It returns p itself, without allocating, when p is clean.
func Clean(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		// Keep the trailing slash: /api/ is a subtree, /api is not.
		if len(p) == len(np)+1 && strings.HasPrefix(p, np) {
			return p
		}
		return np + "/"
	}
	return np
}

// CleanURL returns u with its path cleaned (see Clean). As in ServeMux,
// the escaped path is cleaned: %2e%2e is a segment like any other. It
// returns u itself when the path is clean already, and when the cleaned
// path does not parse.
func CleanURL(u *url.URL) *url.URL {
	escaped := u.EscapedPath()
	clean := Clean(escaped)
	if clean == escaped {
		return u
	}
	c, err := url.ParseRequestURI(clean)
	if err != nil {
		return u
	}
	out := *u
	out.Path, out.RawPath = c.Path, c.RawPath
	return &out
}
