package server

import (
	"log/slog"
	"strings"

	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/rls"
)

// LogConfigProblems logs a configuration that does not load (an error
// wrapping ErrConfig, as New and Reload return) at Error, one record per
// problem, with attributes file, line and column where the error knows
// them, and error, the problem's message: a log query on file= or line=
// finds each problem, where one value joining them all, line by line,
// would hide them. sluice serve logs a start this way and the server a
// reload, so that the two read alike.
func LogConfigProblems(log *slog.Logger, err error) {
	for _, p := range configProblems(err) {
		log.Error("the configuration does not load", p...)
	}
}

// configProblems splits a load error into the attributes of one log
// record per problem. An error it cannot take apart is one record, its
// text whole, so that nothing it says is lost.
func configProblems(err error) [][]any {
	var out [][]any
	var walk func(error)
	walk = func(err error) {
		switch e := err.(type) {
		case *policy.Error:
			for _, p := range e.Problems {
				out = append(out, []any{"file", p.File, "line", p.Line, "column", p.Column, "error", p.Message})
			}
			return
		case *rls.ConfigError:
			attrs := []any{"file", e.File}
			if e.Line > 0 { // 0: the file as a whole
				attrs = append(attrs, "line", e.Line)
			}
			out = append(out, append(attrs, "error", e.Msg))
			return
		}
		// Only what errors.Join and fmt.Errorf("%w: %w", ErrConfig, …)
		// put together is taken apart: their text is their parts'.
		if m, ok := err.(interface{ Unwrap() []error }); ok {
			parts := m.Unwrap()
			texts := make([]string, len(parts))
			for i, p := range parts {
				texts[i] = p.Error()
			}
			switch {
			case len(parts) == 2 && parts[0] == ErrConfig && err.Error() == texts[0]+": "+texts[1]:
				walk(parts[1])
				return
			case err.Error() == strings.Join(texts, "\n"):
				for _, p := range parts {
					walk(p)
				}
				return
			}
		}
		out = append(out, []any{"error", strings.TrimPrefix(err.Error(), ErrConfig.Error()+": ")})
	}
	walk(err)
	return out
}
