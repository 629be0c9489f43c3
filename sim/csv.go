package sim

import (
	"bufio"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// MaxCSVBytes is the most ReadCSV reads.
const MaxCSVBytes = 64 << 20

// bom is the UTF-8 byte order mark.
const bom = "\ufeff"

// LineError is an error in one line of a CSV file.
type LineError struct {
	// Line is the line number, from 1.
	Line int
	// Err says what is wrong with it.
	Err error
}

// Error returns "line N: what is wrong".
func (e *LineError) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }

// Unwrap returns e.Err.
func (e *LineError) Unwrap() error { return e.Err }

// ReadCSV reads traffic from CSV, one request per line:
//
//	time,key[,cost]
//
// The time is either seconds from the start, with up to six decimals
// (0, 9.9, 12.000250), or an RFC 3339 instant (2025-06-01T12:00:09.9Z)
// from 1970 on; one file uses one kind. The key names whose counter the
// request counts against; the cost, a whole number from 1, defaults to 1.
// Lines may come in any order. A first line that names the columns,
// "time,key" or "time,key,cost" in any case, is a header and skipped; any
// other first line is a request, so that a mistyped time is an error and
// not a header that drops a request in silence. Blank lines (empty or
// holding only spaces) and lines starting with # are skipped too.
// Spaces around fields are ignored, and so is a byte order mark at the
// start, as spreadsheets write before "CSV UTF-8".
//
// ReadCSV returns the requests, with At measured from start, and start:
// the Unix epoch for times in seconds (so fixed windows start at second
// 0), or the earliest instant rounded down to the second for RFC 3339
// times (so fixed windows fall where they would in production). It reads
// at most MaxCSVBytes and MaxEvents requests spanning under MaxSeconds;
// an error in a line is a [*LineError] naming it, and quotes at most a
// few dozen bytes of a field. Each request's Line is the line it was read
// from.
func ReadCSV(r io.Reader) (events []Event, start time.Time, err error) {
	return readCSV(r, MaxEvents, MaxCSVBytes)
}

// readCSV is ReadCSV with its bounds as arguments, so that tests can
// reach them cheaply.
func readCSV(r io.Reader, maxEvents int, maxBytes int64) (events []Event, start time.Time, err error) {
	cr := &countingReader{r: io.LimitReader(r, maxBytes+1)}
	br := bufio.NewReader(cr)
	if b, _ := br.Peek(len(bom)); string(b) == bom {
		_, _ = br.Discard(len(bom))
	}
	rd := csv.NewReader(br)
	rd.FieldsPerRecord = -1
	rd.TrimLeadingSpace = true
	rd.Comment = '#'
	rd.ReuseRecord = true

	const (
		unknown = iota
		relative
		absolute
	)
	kind := unknown
	var abs []int64 // RFC 3339 instants, µs since the epoch, per event
	first := true
	for {
		rec, err := rd.Read()
		if cr.n > maxBytes {
			return nil, time.Time{}, fmt.Errorf("csv is larger than %s", sizeText(maxBytes))
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				// A quote left open swallows the lines after it: the
				// parser notices on the last one, but the fault is where
				// the record starts.
				if pe.StartLine > 0 && pe.StartLine < pe.Line {
					return nil, time.Time{}, &LineError{Line: pe.StartLine,
						Err: fmt.Errorf("%w: the record starting here runs on to line %d; is a quote left open?", pe.Err, pe.Line)}
				}
				return nil, time.Time{}, &LineError{Line: pe.Line, Err: pe.Err}
			}
			return nil, time.Time{}, fmt.Errorf("reading csv: %w", err)
		}
		if len(rec) == 1 && strings.TrimSpace(rec[0]) == "" {
			continue // a blank line that holds spaces
		}
		line, _ := rd.FieldPos(0)
		fail := func(format string, args ...any) ([]Event, time.Time, error) {
			return nil, time.Time{}, &LineError{Line: line, Err: fmt.Errorf(format, args...)}
		}
		wasFirst := first
		first = false
		if wasFirst && isHeader(rec) {
			continue
		}
		if len(rec) < 2 || len(rec) > 3 {
			return fail("want time,key or time,key,cost; got %d field(s)", len(rec))
		}
		ts := strings.TrimSpace(rec[0])
		if len(events) == maxEvents {
			return fail("more than %d requests", maxEvents)
		}
		e := Event{Line: line}
		if us, ok, err := parseSeconds(ts); ok {
			if err != nil {
				return fail("time %s: %w", quote(ts), err)
			}
			if kind == absolute {
				return fail("time %s is in seconds, but earlier lines use RFC 3339 instants; use one kind", quote(ts))
			}
			kind = relative
			e.At = time.Duration(us) * time.Microsecond
		} else {
			t, err := time.Parse(time.RFC3339Nano, ts)
			if err != nil {
				hint := ""
				if wasFirst {
					hint = "; a header line names the columns, time,key or time,key,cost"
				}
				return fail("time %s: want seconds from the start (such as 9.9) or an RFC 3339 instant (such as 2025-06-01T12:00:09.9Z)%s", quote(ts), hint)
			}
			if kind == relative {
				return fail("time %s is an RFC 3339 instant, but earlier lines use seconds; use one kind", quote(ts))
			}
			if t.UnixMicro() < 0 {
				return fail("time %s is before 1970: sluice's algorithms count time from the Unix epoch, 1970-01-01T00:00:00Z", quote(ts))
			}
			kind = absolute
			abs = append(abs, t.UnixMicro())
		}
		e.Key = strings.TrimSpace(rec[1])
		switch {
		case e.Key == "":
			return fail("empty key")
		case len(e.Key) > MaxKeyLen:
			return fail("key longer than %d bytes", MaxKeyLen)
		case !utf8.ValidString(e.Key):
			return fail("key is not valid UTF-8")
		case strings.IndexFunc(e.Key, unicode.IsControl) >= 0:
			return fail("key %s holds a control character", quote(e.Key))
		}
		if len(rec) == 3 {
			c := strings.TrimSpace(rec[2])
			n, err := strconv.ParseInt(c, 10, 64)
			if err != nil || n < 1 {
				return fail("cost %s: want a whole number from 1", quote(c))
			}
			e.Cost = n
		}
		events = append(events, e)
	}
	if len(events) == 0 {
		return nil, time.Time{}, errors.New("csv holds no requests")
	}
	start = time.Unix(0, 0).UTC()
	if kind == absolute {
		lo := abs[0]
		for _, us := range abs {
			lo = min(lo, us)
		}
		lo = floorDiv(lo, 1e6) * 1e6
		start = time.UnixMicro(lo).UTC()
		for i, us := range abs {
			if us-lo >= MaxSeconds*1e6 {
				// us-lo, in µs, fits an int64 for any instant time.Parse
				// reads; in ns, a time.Duration, it may not.
				after := fmt.Sprintf("more than %d seconds", MaxSeconds)
				if us-lo <= math.MaxInt64/int64(time.Microsecond) {
					after = (time.Duration(us-lo) * time.Microsecond).String()
				}
				return nil, time.Time{}, fmt.Errorf("the requests span more than %d seconds (%s is %s after %s)", MaxSeconds, time.UnixMicro(us).UTC().Format(time.RFC3339Nano), after, start.Format(time.RFC3339))
			}
			events[i].At = time.Duration(us-lo) * time.Microsecond
		}
	}
	return events, start, nil
}

// sizeText formats a size in bytes: "64 MiB", "100 bytes".
func sizeText(n int64) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}

// columns are the names of the columns ReadCSV reads, in order.
var columns = []string{"time", "key", "cost"}

// isHeader reports whether a record names the columns, as a header line
// does: time and key, and cost if it has a third field.
func isHeader(rec []string) bool {
	if len(rec) < 2 || len(rec) > len(columns) {
		return false
	}
	for i, f := range rec {
		if !strings.EqualFold(strings.TrimSpace(f), columns[i]) {
			return false
		}
	}
	return true
}

// maxQuoted is the most bytes of a field an error quotes: enough to
// recognise it, and an error line stays short however long the field.
const maxQuoted = 32

// quote returns field quoted as %q does, cut to maxQuoted bytes (at a
// character's boundary) with an ellipsis after the quote if it is longer.
func quote(field string) string {
	if len(field) <= maxQuoted {
		return strconv.Quote(field)
	}
	n := maxQuoted
	for n > 0 && !utf8.RuneStart(field[n]) {
		n--
	}
	return strconv.Quote(field[:n]) + "…"
}

// parseSeconds reads seconds with up to six decimals as microseconds,
// exactly. ok is false if s does not look like a number of seconds at all
// (it may be an RFC 3339 instant); err says why a number is not usable.
func parseSeconds(s string) (us int64, ok bool, err error) {
	whole, frac, dot := strings.Cut(s, ".")
	digits := func(x string) bool {
		for _, c := range x {
			if c < '0' || c > '9' {
				return false
			}
		}
		return true
	}
	if s == "" || s == "." || !digits(whole) || !digits(frac) {
		if strings.HasPrefix(s, "-") {
			return 0, true, errors.New("before the start: times are seconds from 0")
		}
		return 0, false, nil
	}
	if dot && len(frac) > 6 {
		return 0, true, errors.New("more than six decimals: times count microseconds")
	}
	var w int64
	if whole != "" {
		w, err = strconv.ParseInt(whole, 10, 64)
		if err != nil || w >= MaxSeconds {
			return 0, true, fmt.Errorf("a simulation covers less than %d seconds", MaxSeconds)
		}
	}
	f := int64(0)
	if frac != "" {
		f, _ = strconv.ParseInt((frac + "000000")[:6], 10, 64)
	}
	return w*1e6 + f, true, nil
}

// floorDiv returns ⌊a/b⌋ for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
