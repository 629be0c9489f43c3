package redis_test

import (
	"context"
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/rate"
	"github.com/sluicehq/sluice/store/redis"
)

// scriptCommands returns the commands decide.lua runs, as it names them
// in redis.call and redis.pcall, upper-cased.
func scriptCommands(t *testing.T) []string {
	t.Helper()
	src, err := os.ReadFile("scripts/decide.lua")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var cmds []string
	for _, m := range regexp.MustCompile(`redis\.p?call\(\s*['"]([A-Za-z|]+)['"]`).FindAllStringSubmatch(string(src), -1) {
		c := strings.ToUpper(m[1])
		if !seen[c] {
			seen[c] = true
			cmds = append(cmds, c)
		}
	}
	if len(cmds) == 0 {
		t.Fatal("no redis.call in scripts/decide.lua")
	}
	return cmds
}

// When an ACL refuses a command the script runs, Redis names a line of
// the script, which says nothing to an operator: the error names every
// command the script runs, the script's list as it is, and where sluice's
// docs give the ACL. Redis's reply stays in it, and reachable.
func TestACLHintNamesTheScriptsCommands(t *testing.T) {
	srv := redistest.Start(t)
	srv.MustDo("ACL", "SETUSER", "sluice", "on", ">pw", "~lim:*", "~{lim:*", "+@all", "-time")
	s, err := redis.Dial("redis://sluice:pw@"+srv.Addr()+"/0", redis.Options{Prefix: "lim:"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	limit := rate.Limit{Algorithm: rate.GCRA, Count: 10, Period: time.Minute}
	_, err = s.Decide(context.Background(), rate.Request{Key: "k", Limit: limit, Cost: 1})
	if err == nil {
		t.Fatal("a decision as a user without TIME: no error")
	}
	msg := err.Error()
	if re := new(rueidis.RedisError); !errors.As(err, &re) || !strings.Contains(re.Error(), "can't run this command") {
		t.Errorf("error %q: want Redis's refusal, reachable with errors.As", msg)
	}
	for _, c := range scriptCommands(t) {
		if !strings.Contains(msg, c) {
			t.Errorf("error %q does not name %s, which the script runs", msg, c)
		}
	}
	if !strings.Contains(msg, "docs/serve.md") || !strings.Contains(msg, "ACL SETUSER") {
		t.Errorf("error %q does not point to the ACL in docs/serve.md", msg)
	}
}

// Other errors get no hint: NOPERM on the keys is no command refused.
func TestACLHintOnlyForACommandRefused(t *testing.T) {
	srv := redistest.Start(t)
	srv.MustDo("ACL", "SETUSER", "sluice", "on", ">pw", "~other:*", "+@all")
	s, err := redis.Dial("redis://sluice:pw@"+srv.Addr()+"/0", redis.Options{Prefix: "lim:"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	limit := rate.Limit{Algorithm: rate.GCRA, Count: 10, Period: time.Minute}
	_, err = s.Decide(context.Background(), rate.Request{Key: "k", Limit: limit, Cost: 1})
	if err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("a decision on keys the ACL does not match: %v; want NOPERM", err)
	}
	if strings.Contains(err.Error(), "docs/serve.md") {
		t.Errorf("error %q: a hint on the commands, for a refusal of the keys", err)
	}
}
