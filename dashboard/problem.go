package dashboard

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// Problem is an error response, served as application/problem+json
// (RFC 9457):
//
//	{"type": "about:blank", "title": "Bad Request", "status": 400,
//	 "detail": "csv line 3: time \"x\": want seconds from the start …",
//	 "field": "csv", "line": 3}
type Problem struct {
	// Type is "about:blank": the status says what kind of problem it is.
	Type string `json:"type"`
	// Title is the status text, such as "Bad Request".
	Title string `json:"title"`
	// Status is the HTTP status code.
	Status int `json:"status"`
	// Detail says what is wrong and what to change, for people.
	Detail string `json:"detail"`
	// Field names the request field at fault, if one is: scenario, csv,
	// limit, algorithms, setups, instances, seconds, seed or max_delay; or a form's
	// field that POST api/sim does not know, by its own name.
	Field string `json:"field,omitempty"`
	// Line is the line of the CSV at fault, from 1, if one is.
	Line int `json:"line,omitempty"`
}

// problem is an error that knows its response.
type problem struct{ p Problem }

func (e *problem) Error() string { return e.p.Detail }

// newProblem returns an error answered with status and detail.
func newProblem(status int, field, detail string) *problem {
	return &problem{Problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: detail, Field: field}}
}

// writeProblem sends p.
func writeProblem(w http.ResponseWriter, p Problem) {
	b, err := json.Marshal(p)
	if err != nil {
		http.Error(w, p.Detail, p.Status)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(b)+1))
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(p.Status)
	_, _ = w.Write(append(b, '\n'))
}
