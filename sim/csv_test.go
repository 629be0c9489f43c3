package sim

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestReadCSV(t *testing.T) {
	us := time.Microsecond
	tests := []struct {
		name  string
		in    string
		want  []Event
		start time.Time
	}{
		{
			name: "seconds with a header",
			in:   "time,key,cost\n0,a\n9.9,b,2\n12.000250, c , 3\n",
			want: []Event{{At: 0, Key: "a", Line: 2}, {At: 9900 * time.Millisecond, Key: "b", Cost: 2, Line: 3}, {At: 12*time.Second + 250*us, Key: "c", Cost: 3, Line: 4}},
		},
		{
			name: "no header, comments, blank lines, CRLF, trailing dot, leading dot",
			in:   "# traffic\r\n\r\n1.,k\r\n.5,k\r\n",
			want: []Event{{At: time.Second, Key: "k", Line: 3}, {At: 500 * time.Millisecond, Key: "k", Line: 4}},
		},
		{
			// As spreadsheets save "CSV UTF-8".
			name: "byte order mark before a header",
			in:   "\ufefftime,key\r\n0,a\r\n",
			want: []Event{{At: 0, Key: "a", Line: 2}},
		},
		{
			name: "byte order mark before a quoted header",
			in:   "\ufeff\"time\",\"key\"\n0,a\n",
			want: []Event{{At: 0, Key: "a", Line: 2}},
		},
		{
			name: "byte order mark before a request",
			in:   "\ufeff2.5,a\n",
			want: []Event{{At: 2500 * time.Millisecond, Key: "a", Line: 1}},
		},
		{
			name: "blank lines holding spaces or tabs",
			in:   "  \ntime,key\n0,a\n\t\n1,b\n   ",
			want: []Event{{At: 0, Key: "a", Line: 3}, {At: time.Second, Key: "b", Line: 5}},
		},
		{
			name: "quoted key with a comma",
			in:   `3,"user,42"` + "\n",
			want: []Event{{At: 3 * time.Second, Key: "user,42", Line: 1}},
		},
		{
			name:  "RFC 3339, out of order, offsets",
			in:    "time,key\n2025-06-01T12:00:09.9Z,a\n2025-06-01T12:00:01.25Z,b\n2025-06-01T14:00:10+02:00,c\n",
			want:  []Event{{At: 8900 * time.Millisecond, Key: "a", Line: 2}, {At: 250 * time.Millisecond, Key: "b", Line: 3}, {At: 9 * time.Second, Key: "c", Line: 4}},
			start: time.Date(2025, 6, 1, 12, 0, 1, 0, time.UTC),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, start, err := ReadCSV(strings.NewReader(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("events\n got  %+v\n want %+v", got, tt.want)
			}
			want := tt.start
			if want.IsZero() {
				want = time.Unix(0, 0).UTC()
			}
			if !start.Equal(want) {
				t.Errorf("start %v, want %v", start, want)
			}
		})
	}
}

func TestReadCSVErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		line int // 0: not a line's error
		want string
	}{
		{"empty", "", 0, "no requests"},
		{"header only", "time,key\n", 0, "no requests"},
		{"one field", "0,a\n1\n", 2, "got 1 field"},
		{"four fields", "0,a,1,x\n", 1, "got 4 field"},
		{"header not first", "0,a\ntime,key\n", 2, `time "time"`},
		{"bad time", "0,a\n1,a\nsoon,a\n", 3, "want seconds from the start"},
		{"negative time", "-1,a\n", 1, "before the start"},
		{"too many decimals", "0.1234567,a\n", 1, "six decimals"},
		{"too late", "3600,a\n", 1, "less than 3600 seconds"},
		{"huge", "99999999999999999999,a\n", 1, "less than 3600 seconds"},
		{"mixed kinds", "0,a\n2025-06-01T12:00:00Z,a\n", 2, "use one kind"},
		{"mixed kinds the other way", "2025-06-01T12:00:00Z,a\n0,a\n", 2, "use one kind"},
		{"span", "2025-06-01T12:00:00Z,a\n2025-06-01T13:00:00Z,a\n", 0, "span more than 3600 seconds"},
		// Package rate counts time from the Unix epoch: a fresh key's state
		// is at 0 µs, so earlier instants would find every bucket spent.
		{"before 1970", "1970-01-01T00:00:00Z,a\n1969-12-31T23:59:59.5Z,a\n", 2, "before 1970"},
		{"empty key", "0, \n", 1, "empty key"},
		{"long key", "0," + strings.Repeat("k", MaxKeyLen+1) + "\n", 1, "longer than"},
		{"control key", "0,\"a\tb\"\n", 1, "control character"},
		{"bad utf-8", "0,\xff\n", 1, "UTF-8"},
		{"zero cost", "0,a,0\n", 1, `cost "0"`},
		{"bad cost", "0,a\n0,a,x\n", 2, `cost "x"`},
		{"bad quote", "0,a\n1,\"a\n", 2, "quote"},
		// A quote left open runs on to the end of the file: the error
		// names the line where the record starts, not the last one.
		{"open quote", "0,a\n1,\"a\n2,b\n3,c\n", 2, "runs on to line 4"},
		{"quote closed on a later line", "0,a\n1,\"a\nb\"x,1\n", 2, "runs on to line 3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := ReadCSV(strings.NewReader(tt.in))
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q, want it to say %q", err, tt.want)
			}
			var le *LineError
			switch {
			case tt.line == 0 && errors.As(err, &le):
				t.Errorf("error %q names a line", err)
			case tt.line != 0 && !errors.As(err, &le):
				t.Errorf("error %q is not a *LineError", err)
			case tt.line != 0 && le.Line != tt.line:
				t.Errorf("error %q on line %d, want %d", err, le.Line, tt.line)
			case tt.line != 0 && !strings.HasPrefix(err.Error(), fmt.Sprintf("line %d: ", tt.line)):
				t.Errorf("error %q does not start with its line", err)
			}
		})
	}
}

// An open quote's error still wraps the csv package's, for callers that
// test for it.
func TestReadCSVOpenQuoteWraps(t *testing.T) {
	_, _, err := ReadCSV(strings.NewReader("0,a\n1,\"a\n2,b\n"))
	if !errors.Is(err, csv.ErrQuote) {
		t.Errorf("error %v does not wrap csv.ErrQuote", err)
	}
}

func TestReadCSVBounds(t *testing.T) {
	t.Run("events", func(t *testing.T) {
		in := "time,key\n" + strings.Repeat("1,k\n", 11)
		if _, _, err := readCSV(strings.NewReader(in), 11, MaxCSVBytes); err != nil {
			t.Fatalf("11 requests, at most 11: %v", err)
		}
		_, _, err := readCSV(strings.NewReader(in), 10, MaxCSVBytes)
		var le *LineError
		if !errors.As(err, &le) || le.Line != 12 || !strings.Contains(err.Error(), "more than 10 requests") {
			t.Errorf("error %v, want more than 10 requests on line 12", err)
		}
	})
	t.Run("bytes", func(t *testing.T) {
		in := "# a comment\n0,k\n" // 16 bytes
		if _, _, err := readCSV(strings.NewReader(in), MaxEvents, 16); err != nil {
			t.Fatalf("16 bytes, at most 16: %v", err)
		}
		_, _, err := readCSV(strings.NewReader(in), MaxEvents, 15)
		if err == nil || !strings.Contains(err.Error(), "larger than 15 bytes") {
			t.Errorf("error %v, want the size named", err)
		}
	})
}

// writeCSV writes events as ReadCSV reads them, in seconds.
func writeCSV(events []Event) []byte {
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	for _, e := range events {
		us := int64(e.At / time.Microsecond)
		rec := []string{fmt.Sprintf("%d.%06d", us/1e6, us%1e6), e.Key}
		if e.Cost != 0 {
			rec = append(rec, strconv.FormatInt(e.Cost, 10))
		}
		_ = w.Write(rec)
	}
	w.Flush()
	return b.Bytes()
}

// FuzzReadCSV checks that ReadCSV never panics, that what it accepts
// stays within its bounds and makes a valid scenario, and that writing
// what it read and reading that again gives the same requests.
func FuzzReadCSV(f *testing.F) {
	for _, s := range []string{
		"time,key,cost\n0,a\n9.9,b,2\n",
		"2025-06-01T12:00:09.9Z,a\n2025-06-01T12:00:01Z,b,3\n",
		"# c\n\n.5,\"x,y\"\n",
		"0,a\n1,\"a\n",
		"3599.999999,k,9223372036854775807\n",
		"\ufefftime,key\r\n \r\n0,a\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		events, start, err := ReadCSV(bytes.NewReader(data))
		if err != nil {
			return
		}
		for _, e := range events {
			if e.At < 0 || e.At >= MaxSeconds*time.Second || e.At%time.Microsecond != 0 || e.Key == "" || e.Cost < 0 {
				t.Fatalf("accepted out-of-bounds request %+v", e)
			}
		}
		sc := Scenario{Name: "fuzz", Limit: tenPer10s, Start: start, Events: events}
		if err := sc.Validate(); err != nil {
			t.Fatalf("accepted requests do not validate: %v", err)
		}
		again, start2, err := ReadCSV(bytes.NewReader(writeCSV(events)))
		if err != nil {
			t.Fatalf("rereading %q: %v", writeCSV(events), err)
		}
		// The lines may differ: the file written has no header, comments
		// or blank lines.
		for i := range min(len(events), len(again)) {
			events[i].Line, again[i].Line = 0, 0
		}
		if !start2.Equal(time.Unix(0, 0)) || !slices.Equal(again, events) {
			t.Fatalf("round trip changed the requests:\n %+v\n %+v", events, again)
		}
	})
}

// TestReadCSVHeaderOnlyIfNamed: a first line is a header only if its
// fields are the documented column names; a mistyped first time is a
// request with a bad time, not a header skipped in silence.
func TestReadCSVHeaderOnlyIfNamed(t *testing.T) {
	for _, in := range []string{"time,key\n0,a\n", "time,key,cost\n0,a\n", "Time, KEY ,Cost\n0,a\n", "\"TIME\",\"key\"\n0,a\n"} {
		got, _, err := ReadCSV(strings.NewReader(in))
		if err != nil || len(got) != 1 {
			t.Errorf("%q: %d requests, %v; want the header skipped and 1 request", in, len(got), err)
		}
	}
	for _, in := range []string{"abc,a\n1,a\n", "NaN,a\n1,a\n", "O.5,a\n1,a\n", "ts,key\n1,a\n", "time,user\n1,a\n", "time,key,weight\n1,a\n", "key,time\n1,a\n"} {
		_, _, err := ReadCSV(strings.NewReader(in))
		var le *LineError
		if !errors.As(err, &le) || le.Line != 1 || !strings.Contains(err.Error(), "time ") {
			t.Errorf("%q: error %v, want a bad time on line 1", in, err)
		}
	}
}

// TestReadCSVQuotesShort: an error quotes a few dozen bytes of a bad
// field, not all of it.
func TestReadCSVQuotesShort(t *testing.T) {
	huge := strings.Repeat("9", 5<<20)
	for _, tt := range []struct{ name, in, want string }{
		{"time", "0,a\n1" + huge + ",a\n", `time "199999`},
		{"letters", "0,a\nx" + huge + ",a\n", `time "x99999`},
		{"cost", "0,a," + huge + "x\n", `cost "99999`},
		{"control key", "0,\"k\t" + strings.Repeat("k", MaxKeyLen-2) + "\"\n", `key "k\tkkk`},
	} {
		_, _, err := ReadCSV(strings.NewReader(tt.in))
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "…") || len(err.Error()) > 200 {
			t.Errorf("%s: error of %d bytes, want under 200 with %q and an ellipsis: %.300q", tt.name, len(fmt.Sprint(err)), tt.want, fmt.Sprint(err))
		}
	}
	// A short field is quoted whole, without an ellipsis.
	if _, _, err := ReadCSV(strings.NewReader("soon,a\n")); err == nil || !strings.Contains(err.Error(), `time "soon":`) {
		t.Errorf("error %v, want the whole short field", err)
	}
}

// TestReadCSVFarFuture: a span too long for a time.Duration is said
// without overflowing.
func TestReadCSVFarFuture(t *testing.T) {
	_, _, err := ReadCSV(strings.NewReader("2025-06-01T12:00:00Z,a\n9999-12-31T00:00:00Z,a\n"))
	if err == nil || !strings.Contains(err.Error(), "span more than 3600 seconds") || strings.Contains(err.Error(), " -") {
		t.Fatalf("error %v, want the span said without a negative duration", err)
	}
	if !strings.Contains(err.Error(), "9999-12-31T00:00:00Z is more than 3600 seconds after 2025-06-01T12:00:00Z") {
		t.Errorf("error %v, want the instant and how far it is", err)
	}
	// A span that fits says how long it is.
	_, _, err = ReadCSV(strings.NewReader("2025-06-01T12:00:00Z,a\n2025-06-01T13:00:00.5Z,a\n"))
	if err == nil || !strings.Contains(err.Error(), "is 1h0m0.5s after") {
		t.Errorf("error %v, want the span of 1h0m0.5s", err)
	}
}
