package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protowire"
)

// The lean client asks ShouldRateLimit over HTTP/2 frames written and read
// by hand. grpc-go's client spends about as much CPU on a call as the
// server under test does, and shares the machine's cores with it; Envoy,
// the client in production, is a lean C++ HTTP/2 client. This one does
// the least a correct unary gRPC call needs: header blocks encoded once
// per connection, a request message appended by hand, one write per call,
// and one reader goroutine per connection handing each answer to the
// caller waiting for it.

const (
	// h2RecvWindow is our receive window, for each stream and for the
	// connection: far more than the answers in flight ever take, so the
	// server never waits for a WINDOW_UPDATE from us.
	h2RecvWindow = 1 << 30
	// h2DefaultWindow is the protocol's initial window, ours and the
	// server's, until SETTINGS and WINDOW_UPDATE change it.
	h2DefaultWindow = 65535
	// h2HeaderTable is the HPACK dynamic table we let the server's encoder
	// use for its answers: the protocol's default, said explicitly.
	h2HeaderTable = 4096
	// rlsPath is the gRPC method the calls ask.
	rlsPath = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
)

// rlsLeanCall asks Envoy's rate limit service at addr about the client
// keys[i mod len(keys)] over rlsConns connections, as rlsCall does and
// with the same check of the answer, but from the lean client of this
// file instead of grpc-go's. close closes the connections.
func rlsLeanCall(b *testing.B, addr string, keys []string) (do call, close func()) {
	b.Helper()
	l, err := dialLeanRLS(addr, keys)
	if err != nil {
		b.Fatal(err)
	}
	return l.do, l.close
}

// leanRLS is the lean client's connections and its callers' streams.
type leanRLS struct {
	keys    []string
	conns   []*h2Conn  // caller c uses conns[c%rlsConns]
	streams []h2Stream // caller c's, reused by each of its calls
}

// dialLeanRLS opens rlsConns connections to addr.
func dialLeanRLS(addr string, keys []string) (*leanRLS, error) {
	l := &leanRLS{keys: keys, streams: make([]h2Stream, loadCallers)}
	for i := range l.streams {
		l.streams[i].done = make(chan error, 1)
	}
	for range rlsConns {
		c, err := dialH2(addr)
		if err != nil {
			l.close()
			return nil, err
		}
		l.conns = append(l.conns, c)
	}
	return l, nil
}

// do is a call: it sends caller c's request i and checks the answer as
// rlsCall does.
func (l *leanRLS) do(ctx context.Context, c int, i int64) error {
	s := &l.streams[c]
	s.req = append(s.req[:0], 0, 0, 0, 0, 0) // gRPC's prefix: not compressed, then the length
	s.req = appendRateLimitRequest(s.req, l.keys[i%int64(len(l.keys))])
	binary.BigEndian.PutUint32(s.req[1:5], uint32(len(s.req)-5))
	if err := l.conns[c%rlsConns].roundTrip(ctx, s); err != nil {
		return err
	}
	msg, err := grpcMessage(s.body)
	if err != nil {
		return err
	}
	a, err := parseRateLimitResponse(msg)
	if err != nil {
		return fmt.Errorf("ShouldRateLimit: response: %w", err)
	}
	if a.code != rlsv3.RateLimitResponse_OK || a.statuses != 1 || a.limit != 1000000 {
		return fmt.Errorf("ShouldRateLimit: overall_code %v, %d statuses, the first's requests_per_unit %d; want OK under the configured limit", a.code, a.statuses, a.limit)
	}
	return nil
}

// close closes the connections and waits for their readers to end.
func (l *leanRLS) close() {
	for _, c := range l.conns {
		c.nc.Close()
		<-c.readerDone
	}
}

// h2Stream is one call in flight. Its caller fills req and waits on done;
// meanwhile the connection's reader fills the rest, holding the
// connection's mu, as long as the stream is in the connection's streams.
type h2Stream struct {
	id        uint32
	req       []byte     // the request message with its gRPC prefix
	done      chan error // one value per call: nil once trailers say grpc-status 0
	gotHeader bool       // the response's HEADERS came
	body      []byte     // the response's DATA

	// header and trailer are the decoded response fields, kept for the
	// tests, which check that the HPACK decoder keeps its state right.
	header, trailer []hpack.HeaderField
}

// h2Conn is one HTTP/2 connection with its reader goroutine.
type h2Conn struct {
	nc         net.Conn
	fr         *http2.Framer // the reader's to read; writing needs wmu
	bw         *bufio.Writer // under fr: a call's frames leave in one write
	readerDone chan struct{}
	// first and next are the request header blocks: first for the
	// connection's first call, next for every later one (requestBlocks).
	first, next []byte

	wmu    sync.Mutex // serializes writes, and so orders stream ids on the wire
	nextID uint32     // the next stream id: odd, increasing; guarded by wmu
	sent1  bool       // the first block went out; guarded by wmu

	mu           sync.Mutex // guards what follows; taken after wmu, never before
	cond         sync.Cond  // on mu: sendWindow grew, or err was set
	streams      map[uint32]*h2Stream
	sendWindow   int64  // connection-level window the server granted
	streamWindow int64  // the window the server grants each new stream
	maxStreams   uint32 // the server's SETTINGS_MAX_CONCURRENT_STREAMS
	recvUnacked  int64  // bytes received since our last connection WINDOW_UPDATE
	err          error  // why new calls fail: GOAWAY, or the connection broke
}

// requestBlocks returns the request header blocks for calls to addr, as
// Envoy's HTTP/2 codec encodes them: the fields Envoy's gRPC client sends
// with a rate limit call, where every field but :path goes into the
// server's HPACK dynamic table the first time (first) and is named by its
// index from then on (next). nghttp2 never indexes :path, and neither
// does QUICHE's encoder (Envoy's other codec) any pseudo-header but
// :authority, so :path is a literal in every block, its name taken from
// the static table. The header table the server allows is the protocol's
// default, 4096 bytes, far more than these fields take, so nothing is
// ever evicted and next stays valid for the connection's life.
//
// A grpc-timeout makes the server set a deadline and its timer, as
// Envoy's (a fixed timeout, 20ms by default, so the same field every
// time) and grpc-go's (the load's two minutes) do; it is the load's bound
// here too, so that a slow moment of the machine fails no call.
func requestBlocks(addr string) (first, next []byte) {
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf) // into a bytes.Buffer: writes cannot fail
	block := func() []byte {
		buf.Reset()
		enc.WriteField(hpack.HeaderField{Name: ":method", Value: "POST"})
		enc.WriteField(hpack.HeaderField{Name: ":scheme", Value: "http"})
		// A literal without indexing, with name index 4 (:path) of the
		// static table and a Huffman-coded value (RFC 7541 6.2.2, 5.2).
		b := appendHPACKInt(buf.AvailableBuffer(), 4, 0x00, 4)
		b = appendHPACKInt(b, 7, 0x80, uint64(hpack.HuffmanEncodeLength(rlsPath)))
		buf.Write(hpack.AppendHuffmanString(b, rlsPath))
		for _, f := range []hpack.HeaderField{
			{Name: ":authority", Value: addr},
			{Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"},
			{Name: "grpc-timeout", Value: strconv.FormatInt(int64(loadTimeout/time.Second), 10) + "S"},
			{Name: "user-agent", Value: "sluice-bench"},
		} {
			enc.WriteField(f)
		}
		return bytes.Clone(buf.Bytes())
	}
	return block(), block()
}

// appendHPACKInt appends v as an HPACK integer with an n-bit prefix (RFC
// 7541 5.1), the bits above the prefix in its first byte set to flags.
func appendHPACKInt(b []byte, n uint, flags byte, v uint64) []byte {
	limit := uint64(1)<<n - 1
	if v < limit {
		return append(b, flags|byte(v))
	}
	b = append(b, flags|byte(limit))
	for v -= limit; v >= 128; v >>= 7 {
		b = append(b, byte(v)|0x80)
	}
	return append(b, byte(v))
}

// dialH2 connects to addr with HTTP/2 over cleartext (prior knowledge)
// and starts the connection's reader.
func dialH2(addr string) (*h2Conn, error) {
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	first, next := requestBlocks(addr)
	c := &h2Conn{
		nc: nc, bw: bufio.NewWriter(nc), first: first, next: next, readerDone: make(chan struct{}),
		nextID: 1, streams: map[uint32]*h2Stream{}, sendWindow: h2DefaultWindow,
		streamWindow: h2DefaultWindow, maxStreams: math.MaxUint32,
	}
	c.cond.L = &c.mu
	c.fr = http2.NewFramer(c.bw, bufio.NewReader(nc))
	c.fr.ReadMetaHeaders = hpack.NewDecoder(h2HeaderTable, nil)
	c.fr.SetReuseFrames()
	c.bw.WriteString(http2.ClientPreface)
	err = c.fr.WriteSettings(
		http2.Setting{ID: http2.SettingEnablePush, Val: 0},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: h2RecvWindow},
		http2.Setting{ID: http2.SettingHeaderTableSize, Val: h2HeaderTable},
	)
	if err == nil {
		err = c.fr.WriteWindowUpdate(0, h2RecvWindow-h2DefaultWindow)
	}
	if err == nil {
		err = c.bw.Flush()
	}
	if err != nil {
		nc.Close()
		return nil, err
	}
	go c.read()
	return c, nil
}

// roundTrip sends s.req on a new stream and waits for the answer to fill
// s, or for ctx to end. It returns nil if the answer came whole with
// grpc-status 0; the caller checks the message.
func (c *h2Conn) roundTrip(ctx context.Context, s *h2Stream) error {
	s.gotHeader, s.body, s.header, s.trailer = false, s.body[:0], s.header[:0], s.trailer[:0]
	n := int64(len(s.req))
	c.wmu.Lock()
	c.mu.Lock()
	for c.err == nil && c.sendWindow < n {
		// Wait without wmu: the reader needs it to answer the server,
		// whose WINDOW_UPDATE may be queued behind a PING or SETTINGS.
		c.wmu.Unlock()
		err := c.waitLocked(ctx)
		c.mu.Unlock()
		if err != nil {
			return err
		}
		c.wmu.Lock()
		c.mu.Lock()
	}
	err := c.err
	switch {
	case err != nil:
	case uint32(len(c.streams)) >= c.maxStreams:
		err = fmt.Errorf("ShouldRateLimit: the server allows %d streams per connection, fewer than the callers sharing one", c.maxStreams)
	case n > c.streamWindow:
		err = fmt.Errorf("ShouldRateLimit: the server's stream window, %d bytes, is smaller than the request", c.streamWindow)
	case c.nextID > math.MaxInt32:
		err = errors.New("ShouldRateLimit: the connection has used up its stream ids")
	}
	if err != nil {
		c.mu.Unlock()
		c.wmu.Unlock()
		return err
	}
	s.id = c.nextID
	c.nextID += 2
	c.streams[s.id] = s
	c.sendWindow -= n
	c.mu.Unlock()
	block := c.next
	if !c.sent1 {
		// Blocks are decoded in the order they are written, which wmu
		// makes the order of this test.
		block, c.sent1 = c.first, true
	}
	err = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: s.id, BlockFragment: block, EndHeaders: true})
	if err == nil {
		err = c.fr.WriteData(s.id, true, s.req)
	}
	if err == nil {
		err = c.bw.Flush()
	}
	c.wmu.Unlock()
	if err != nil {
		c.broken(err) // which ends s too, through s.done
	}
	select {
	case err := <-s.done:
		return err
	case <-ctx.Done():
	}
	c.mu.Lock()
	if _, ok := c.streams[s.id]; ok {
		delete(c.streams, s.id)
		c.mu.Unlock()
		c.write(func() error { return c.fr.WriteRSTStream(s.id, http2.ErrCodeCancel) })
	} else {
		c.mu.Unlock()
		<-s.done // the reader ended it meanwhile: empty done for the next call
	}
	return ctx.Err()
}

// waitLocked waits on c.cond, c.mu held, until the reader signals it or
// ctx ends, and returns ctx's error.
func (c *h2Conn) waitLocked(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() {
		c.mu.Lock()
		c.cond.Broadcast()
		c.mu.Unlock()
	})
	c.cond.Wait()
	stop()
	return ctx.Err()
}

// read reads the server's frames until the connection breaks, handing
// each stream's to the stream and answering what the protocol asks.
func (c *h2Conn) read() {
	defer close(c.readerDone)
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			if se, ok := err.(http2.StreamError); ok { // the stream's fault, not the connection's
				c.end(se.StreamID, fmt.Errorf("ShouldRateLimit: %w", se), true)
				continue
			}
			c.broken(err)
			return
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			c.onHeaders(f)
		case *http2.DataFrame:
			c.onData(f)
		case *http2.RSTStreamFrame:
			c.end(f.StreamID, fmt.Errorf("ShouldRateLimit: RST_STREAM %v", f.ErrCode), false)
		case *http2.SettingsFrame:
			if !f.IsAck() {
				c.onSettings(f)
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				c.write(func() error { return c.fr.WritePing(true, f.Data) })
			}
		case *http2.GoAwayFrame:
			c.onGoAway(f)
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 { // a stream's window matters only for its one DATA frame
				c.mu.Lock()
				c.sendWindow += int64(f.Increment)
				c.cond.Broadcast()
				c.mu.Unlock()
			}
		case *http2.PushPromiseFrame:
			c.broken(errors.New("PUSH_PROMISE, though SETTINGS_ENABLE_PUSH is 0"))
			return
		}
	}
}

// onHeaders checks a response's HEADERS (the first, with :status) and
// trailers (END_STREAM, with grpc-status), and ends the stream at the
// trailers or at the first fault.
func (c *h2Conn) onHeaders(f *http2.MetaHeadersFrame) {
	c.mu.Lock()
	s := c.streams[f.StreamID]
	if s == nil { // cancelled: the decoder has kept its state, which is all that matters
		c.mu.Unlock()
		return
	}
	var err error
	ended := f.StreamEnded()
	if !s.gotHeader {
		s.gotHeader = true
		s.header = append(s.header, f.Fields...)
		if status := f.PseudoValue("status"); status != "200" {
			err = fmt.Errorf("ShouldRateLimit: HTTP :status %q", status)
		} else if ct := fieldValue(f.Fields, "content-type"); !strings.HasPrefix(ct, "application/grpc") {
			err = fmt.Errorf("ShouldRateLimit: content-type %q", ct)
		}
	} else if !ended {
		err = errors.New("ShouldRateLimit: a second HEADERS without END_STREAM")
	}
	if err == nil && ended { // trailers, or a Trailers-Only answer
		s.trailer = append(s.trailer, f.Fields...)
		err = grpcStatus(f.Fields)
	}
	if err != nil || ended {
		c.finishLocked(s, err)
	}
	c.mu.Unlock()
	if err != nil && !ended {
		c.write(func() error { return c.fr.WriteRSTStream(f.StreamID, http2.ErrCodeCancel) })
	}
}

// onData gives a DATA frame's payload to its stream, and the connection
// window back to the server once half of it is used.
func (c *h2Conn) onData(f *http2.DataFrame) {
	var update int64
	c.mu.Lock()
	c.recvUnacked += int64(f.Length) // padding included, as flow control counts it
	if c.recvUnacked >= h2RecvWindow/2 {
		update, c.recvUnacked = c.recvUnacked, 0
	}
	s := c.streams[f.StreamID]
	var err error
	switch {
	case s == nil:
	case !s.gotHeader:
		err = errors.New("ShouldRateLimit: DATA before HEADERS")
	case f.StreamEnded():
		err = errors.New("ShouldRateLimit: the stream ended without trailers")
	default:
		s.body = append(s.body, f.Data()...)
	}
	if err != nil {
		c.finishLocked(s, err)
	}
	c.mu.Unlock()
	if err != nil && !f.StreamEnded() {
		c.write(func() error { return c.fr.WriteRSTStream(f.StreamID, http2.ErrCodeCancel) })
	}
	if update > 0 {
		c.write(func() error { return c.fr.WriteWindowUpdate(0, uint32(update)) })
	}
}

// onSettings takes the server's settings that bound our sending, and
// acknowledges them.
func (c *h2Conn) onSettings(f *http2.SettingsFrame) {
	c.mu.Lock()
	f.ForeachSetting(func(s http2.Setting) error {
		switch s.ID {
		case http2.SettingInitialWindowSize:
			c.streamWindow = int64(s.Val)
		case http2.SettingMaxConcurrentStreams:
			c.maxStreams = s.Val
		}
		return nil
	})
	c.mu.Unlock()
	c.write(c.fr.WriteSettingsAck)
}

// onGoAway fails new calls and the streams the server will not answer;
// those it will answer end as usual.
func (c *h2Conn) onGoAway(f *http2.GoAwayFrame) {
	err := fmt.Errorf("ShouldRateLimit: GOAWAY %v %q", f.ErrCode, f.DebugData())
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	for id, s := range c.streams {
		if id > f.LastStreamID {
			c.finishLocked(s, err)
		}
	}
	c.cond.Broadcast()
	c.mu.Unlock()
}

// finishLocked ends s with err, c.mu held: s leaves streams, so the
// reader fills it no more, and its caller gets err, the one value done
// holds for the call.
func (c *h2Conn) finishLocked(s *h2Stream, err error) {
	delete(c.streams, s.id)
	s.done <- err
}

// end ends stream id, if still waiting, with err, and resets it if the
// server may still think it open.
func (c *h2Conn) end(id uint32, err error, reset bool) {
	c.mu.Lock()
	if s := c.streams[id]; s != nil {
		c.finishLocked(s, err)
	}
	c.mu.Unlock()
	if reset {
		c.write(func() error { return c.fr.WriteRSTStream(id, http2.ErrCodeCancel) })
	}
}

// write writes what frame writes and sends it, holding wmu; an error
// breaks the connection.
func (c *h2Conn) write(frame func() error) {
	c.wmu.Lock()
	err := frame()
	if err == nil {
		err = c.bw.Flush()
	}
	c.wmu.Unlock()
	if err != nil {
		c.broken(err)
	}
}

// broken fails every call in flight and every later one with err, and
// closes the connection, which ends the reader.
func (c *h2Conn) broken(err error) {
	err = fmt.Errorf("ShouldRateLimit: connection: %w", err)
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	for _, s := range c.streams {
		c.finishLocked(s, err)
	}
	c.cond.Broadcast()
	c.mu.Unlock()
	c.nc.Close()
}

// fieldValue returns the value of the field called name, or "".
func fieldValue(fields []hpack.HeaderField, name string) string {
	for _, f := range fields {
		if f.Name == name {
			return f.Value
		}
	}
	return ""
}

// grpcStatus returns nil if trailers say grpc-status 0, and otherwise an
// error with the status and its grpc-message, percent-decoded.
func grpcStatus(trailers []hpack.HeaderField) error {
	status := fieldValue(trailers, "grpc-status")
	switch status {
	case "0":
		return nil
	case "":
		return errors.New("ShouldRateLimit: no grpc-status in the trailers")
	}
	msg := fieldValue(trailers, "grpc-message")
	if m, err := url.PathUnescape(msg); err == nil {
		msg = m
	}
	name := "unknown"
	if n, err := strconv.ParseUint(status, 10, 32); err == nil {
		name = codes.Code(n).String()
	}
	return fmt.Errorf("ShouldRateLimit: grpc-status %s (%s): %s", status, name, msg)
}

// grpcMessage returns the message in body, which must hold exactly one,
// not compressed, behind gRPC's 5-byte prefix.
func grpcMessage(body []byte) ([]byte, error) {
	switch {
	case len(body) < 5:
		return nil, fmt.Errorf("ShouldRateLimit: %d bytes of DATA, not a gRPC message", len(body))
	case body[0] != 0:
		return nil, fmt.Errorf("ShouldRateLimit: compressed flag %d; we asked for no compression", body[0])
	case binary.BigEndian.Uint32(body[1:5]) != uint32(len(body)-5):
		return nil, fmt.Errorf("ShouldRateLimit: message of %d bytes, followed by %d", binary.BigEndian.Uint32(body[1:5]), len(body)-5)
	}
	return body[5:], nil
}

// appendRateLimitRequest appends the protobuf encoding of a
// RateLimitRequest for domain "bench" with one descriptor of one entry,
// remote_address = value. The field numbers are rls.proto's
// (envoy.service.ratelimit.v3) and ratelimit.proto's
// (envoy.extensions.common.ratelimit.v3).
func appendRateLimitRequest(b []byte, value string) []byte {
	const key = "remote_address"
	entry := protowire.SizeTag(1) + protowire.SizeBytes(len(key)) + protowire.SizeTag(2) + protowire.SizeBytes(len(value))
	descriptor := protowire.SizeTag(1) + protowire.SizeBytes(entry)
	b = protowire.AppendTag(b, 1, protowire.BytesType) // RateLimitRequest.domain
	b = protowire.AppendString(b, "bench")
	b = protowire.AppendTag(b, 2, protowire.BytesType) // RateLimitRequest.descriptors
	b = protowire.AppendVarint(b, uint64(descriptor))
	b = protowire.AppendTag(b, 1, protowire.BytesType) // RateLimitDescriptor.entries
	b = protowire.AppendVarint(b, uint64(entry))
	b = protowire.AppendTag(b, 1, protowire.BytesType) // Entry.key
	b = protowire.AppendString(b, key)
	b = protowire.AppendTag(b, 2, protowire.BytesType) // Entry.value
	return protowire.AppendString(b, value)
}

// rlsAnswer is what the check needs of a RateLimitResponse.
type rlsAnswer struct {
	code     rlsv3.RateLimitResponse_Code // overall_code
	statuses int                          // how many statuses
	limit    uint32                       // the first status's current_limit.requests_per_unit
}

// parseRateLimitResponse reads the fields of a RateLimitResponse the
// check needs (the field numbers are rls.proto's) and skips the others.
func parseRateLimitResponse(b []byte) (a rlsAnswer, err error) {
	err = protoFields(b, func(num protowire.Number, typ protowire.Type, v uint64, sub []byte) error {
		switch {
		case num == 1 && typ == protowire.VarintType: // overall_code
			a.code = rlsv3.RateLimitResponse_Code(v)
		case num == 2 && typ == protowire.BytesType: // statuses
			if a.statuses++; a.statuses > 1 {
				return nil
			}
			return protoFields(sub, func(num protowire.Number, typ protowire.Type, _ uint64, sub []byte) error {
				if num != 2 || typ != protowire.BytesType { // DescriptorStatus.current_limit
					return nil
				}
				return protoFields(sub, func(num protowire.Number, typ protowire.Type, v uint64, _ []byte) error {
					if num == 1 && typ == protowire.VarintType { // RateLimit.requests_per_unit
						a.limit = uint32(v)
					}
					return nil
				})
			})
		}
		return nil
	})
	return a, err
}

// protoFields calls f with each field of the protobuf message b, in
// order: its number, its wire type, and its value, in v for a varint and
// in sub for length-delimited bytes (other types are passed neither).
func protoFields(b []byte, f func(num protowire.Number, typ protowire.Type, v uint64, sub []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		var v uint64
		var sub []byte
		switch typ {
		case protowire.VarintType:
			v, n = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			sub, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if err := f(num, typ, v, sub); err != nil {
			return err
		}
	}
	return nil
}
