package server

import (
	"context"
	"strings"
	"testing"
)

// The policy file's warnings are logged at Warn when it is loaded at
// start and on every reload; a file without warnings logs none.
func TestReloadLogsWarnings(t *testing.T) {
	const login = `
policies:
  - name: login
    match: "POST /login"
    key: form:username
    limits: ["5/m"]
`
	ts := newServer(t, login, Options{})
	// warnings returns the warning lines logged since the last call.
	seen := 0
	warnings := func() []string {
		var out []string
		for _, l := range strings.Split(ts.logs.String(), "\n") {
			if strings.Contains(l, `level=WARN msg="policy file warning"`) {
				out = append(out, l)
			}
		}
		out, seen = out[seen:], len(out)
		return out
	}
	steps := []struct {
		what   string
		policy string // "" keeps the file as it is
		want   []string
	}{
		{"start", "", []string{ts.o.ConfigFile + `:5:10: policy \"login\" does not limit requests without form:username`}},
		{"reload of the same file", "", []string{ts.o.ConfigFile + `:5:10: policy \"login\"`}},
		{"reload with the warning fixed", strings.Replace(login, "key: form:username", "keys: [form:username, ip]", 1), nil},
		{"reload with another warning", `
policies:
  - name: api
    match: {authenticated: false}
    key: user
    limits: ["3/m"]
`, []string{ts.o.ConfigFile + `:5:10: key user of policy \"api\" never applies`,
			// The file has no user section: every request is anonymous.
			ts.o.ConfigFile + `:2:1: policy \"api\" keys by user or matches authenticated, but the file has no user section`}},
	}
	for i, st := range steps {
		if i > 0 {
			if st.policy != "" {
				writeFile(t, ts.dir, "sluice.yaml", st.policy)
			}
			if err := ts.Reload(context.Background()); err != nil {
				t.Fatalf("%s: %v", st.what, err)
			}
		}
		got := warnings()
		if len(got) != len(st.want) {
			t.Errorf("%s: %d warnings logged, want %d:\n%s", st.what, len(got), len(st.want), strings.Join(got, "\n"))
			continue
		}
		for j, w := range st.want {
			if !strings.Contains(got[j], w) {
				t.Errorf("%s: logged %s\nwant %s", st.what, got[j], w)
			}
		}
	}
}
