package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// A listen address that is not "off" or host:port with a port of 0 to
// 65535 is a usage error (exit 2) naming the flag, or the variable it
// came from, with what it wants: net.Listen's own message ("missing port
// in address") named neither, and came as a failure at run time (exit 1)
// once the files were read.
func TestServeListenAddress(t *testing.T) {
	for _, tt := range []struct {
		env  map[string]string
		args []string
		want string // in the error; "" for none
	}{
		{nil, []string{"--listen", "8080"}, `--listen "8080": want host:port, such as 127.0.0.1:8080`},
		{nil, []string{"--listen", "127.0.0.1"}, `--listen "127.0.0.1": want host:port`},
		{nil, []string{"--listen", ":99999"}, `--listen ":99999": port 99999 out of range (want 0 to 65535`},
		{nil, []string{"--listen", ":-1"}, `--listen ":-1": port -1`},
		{nil, []string{"--listen", "127.0.0.1:http"}, `--listen "127.0.0.1:http": port "http"`},
		{nil, []string{"--listen", "http://127.0.0.1:8080"}, `--listen "http://127.0.0.1:8080": want host:port with no scheme, such as 127.0.0.1:8080`},
		{nil, []string{"--listen", "127.0.0.1:8080/"}, `--listen "127.0.0.1:8080/"`},
		{nil, []string{"--listen", "::1:8080"}, `an IPv6 address goes in brackets, as [::1]:8080`},
		{nil, []string{"--check-listen", "8081"}, `--check-listen "8081"`},
		{nil, []string{"--grpc-listen", "127.0.0.1"}, `--grpc-listen "127.0.0.1"`},
		{nil, []string{"--admin-listen", "127.0.0.1"}, `--admin-listen "127.0.0.1"`},
		{map[string]string{"SLUICE_LISTEN": "8080"}, nil, `SLUICE_LISTEN "8080"`},
		{map[string]string{"SLUICE_ADMIN_LISTEN": ":70000"}, nil, `SLUICE_ADMIN_LISTEN ":70000"`},
		{map[string]string{"SLUICE_ADMIN_LISTEN": ":70000"}, []string{"--admin-listen", "127.0.0.1:0"}, ""},
		// What is fine: off, an empty host, port 0, IPv6, a name.
		{nil, []string{"--listen", "off", "--check-listen", ":8081", "--grpc-listen", "[::1]:0", "--admin-listen", "localhost:65535"}, ""},
		{map[string]string{"SLUICE_LISTEN": "off", "SLUICE_CHECK_LISTEN": "0.0.0.0:8081"}, nil, ""},
		{nil, nil, ""}, // the defaults
	} {
		_, err := parseServeFlags(tt.args, func(k string) string { return tt.env[k] }, io.Discard)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("env %v, args %q: %v, want no error", tt.env, tt.args, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("env %v, args %q: %v, want an error containing %q", tt.env, tt.args, err, tt.want)
		}
	}
	// Through the command: exit 2, before any file is read or listener
	// opened, each listener's flag alike, that listener's being wanted
	// or not (here the proxy's and the gRPC one are not). The context
	// bounds a server that would start regardless.
	for _, name := range []string{"--listen", "--check-listen", "--grpc-listen", "--admin-listen"} {
		for _, v := range []string{"8080", "127.0.0.1", ":99999", "http://127.0.0.1:8080"} {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			var stdout, errs bytes.Buffer
			code := run(ctx, []string{"serve", "--listen", "off", "--check-listen", "off", "--grpc-listen", "off", "--admin-listen", "off", name, v}, &stdout, &errs)
			cancel()
			stderr := errs.String()
			if code != 2 || !strings.Contains(stderr, name+` "`+v+`"`) || !strings.Contains(stderr, "sluice serve --help") {
				t.Errorf("%s %s: exit %d, stderr %q; want 2 and a message naming %s", name, v, code, stderr, name)
			}
		}
	}
}

// A port in use is still a failure at run time (exit 1): the value was
// fine, the machine was not.
func TestServeListenPortInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	code, _, stderr := runCLI(t, "serve", "--listen", "off", "--check-listen", "off", "--grpc-listen", "off", "--admin-listen", l.Addr().String())
	if code != 1 || !strings.Contains(stderr, "admin listener") || !strings.Contains(stderr, "address already in use") {
		t.Errorf("admin listener on a port in use: exit %d, stderr %q; want 1", code, stderr)
	}
}
