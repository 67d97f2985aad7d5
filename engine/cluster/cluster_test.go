package cluster

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/iii-go/iii/engine/enginetest"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
)

var testKey = []byte("0123456789abcdef0123456789abcdef")

// natsURL runs an embedded NATS server on a free loopback port until the test ends.
func natsURL(t testing.TB) string {
	t.Helper()
	s, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	t.Cleanup(s.Shutdown)
	return s.ClientURL()
}

// syncBuf is a log destination tests read while the cluster writes it.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// join connects an engine named name to the cluster at url with key; serve counts its calls.
func join(t testing.TB, url, name string, key []byte, log io.Writer, serve ServeFunc) *Cluster {
	t.Helper()
	if log == nil {
		log = io.Discard
	}
	c, err := Connect(Options{URL: url, Name: name, Insecure: true, Key: key, Logger: slog.New(slog.NewTextHandler(log, nil))}, serve)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func TestLoadKey(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	secret := strings.Repeat("k", 40)
	for _, c := range []struct{ path, want string }{
		{"", "cluster.key_file is required"},
		{filepath.Join(dir, "missing"), "cluster.key_file: "},
		{write("open", secret, 0o644), "must be 0600"},
		{write("short", "tooshort\n", 0o600), "holds 8 bytes; a cluster key needs at least 32"},
	} {
		_, err := LoadKey(c.path)
		if errcode.CodeOf(err) != errcode.ConfigInvalid || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want CONFIG_INVALID %q", c.path, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), secret) {
			t.Errorf("the key is in an error: %v", err)
		}
	}
	k, err := LoadKey(write("good", "  "+secret+"\n", 0o600))
	if err != nil || string(k) != secret {
		t.Fatalf("%q %v", k, err)
	}
}

// A NATS link without credentials is refused, naming the config keys, unless the config opts in
// with insecure, and then the engine warns at start; a weak key is refused too.
func TestConnectFailsClosedWithoutCredentials(t *testing.T) {
	url := natsURL(t)
	serve := func(_ context.Context, _ Key, _ Request, _ time.Duration, answer func(json.RawMessage, *protocol.Error)) {
		answer(nil, nil)
	}
	_, err := Connect(Options{URL: url, Name: "a", Key: testKey}, serve)
	if errcode.CodeOf(err) != errcode.ConfigInvalid || !strings.Contains(err.Error(), "cluster.nats: "+url+" is given without credentials") ||
		!strings.Contains(err.Error(), "cluster.insecure: true") {
		t.Fatalf("creds-less: %v", err)
	}
	_, err = Connect(Options{URL: url, Name: "a", Insecure: true, Key: []byte("short")}, serve)
	if errcode.CodeOf(err) != errcode.ConfigInvalid || !strings.Contains(err.Error(), "cluster.key_file") {
		t.Fatalf("short key: %v", err)
	}
	var log syncBuf
	join(t, url, "a", testKey, &log, serve)
	if !strings.Contains(log.String(), "joining the NATS cluster without credentials (cluster.insecure: true)") {
		t.Fatalf("no warning: %s", log.String())
	}
	if strings.Contains(log.String(), string(testKey)) {
		t.Fatal("the key was logged")
	}
}

// outsider is a plain NATS client of the same servers, without the cluster key.
func outsider(t *testing.T, url string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// A NATS client without the cluster key, or with another key, cannot call a function, play a
// recorded call again, or call as another caller: each is dropped unanswered and counted.
func TestOutsiderCallsAreDropped(t *testing.T) {
	url := natsURL(t)
	var served atomic.Int32
	var callers sync.Map
	serve := func(_ context.Context, _ Key, r Request, _ time.Duration, answer func(json.RawMessage, *protocol.Error)) {
		served.Add(1)
		callers.Store(r.Caller.Engine, true)
		answer(json.RawMessage(`{"ok":true}`), nil)
	}
	var log syncBuf
	a := join(t, url, "a", testKey, &log, serve)
	a.Sync([]Function{{Namespace: "default", FunctionID: "calc::add"}})
	b := join(t, url, "b", testKey, nil, nil)
	k := Key{"default", "calc::add"}
	nc := outsider(t, url)

	// A recorder of every call; the engine's own call is answered, once.
	rec, err := nc.SubscribeSync(subject(k))
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	var res json.RawMessage
	enginetest.Eventually(t, "b calls a's function", 10*time.Second, func() bool {
		r, perr, found := b.Call(context.Background(), k, Request{Data: json.RawMessage(`{}`)}, time.Second)
		res = r
		return found && perr == nil
	})
	if string(res) != `{"ok":true}` {
		t.Fatalf("engine call: %s", res)
	}
	recorded, err := rec.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	before := served.Load()

	// ask sends what build makes for a reply inbox of the outsider's, and requires it dropped
	// and unanswered.
	ask := func(what string, build func(inbox string) *nats.Msg) {
		t.Helper()
		inbox := nats.NewInbox()
		sub, err := nc.SubscribeSync(inbox)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
		m := build(inbox)
		dropped := a.Dropped()
		if err := nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
		enginetest.Eventually(t, what+" dropped", 10*time.Second, func() bool { return a.Dropped() > dropped })
		if got, err := sub.NextMsg(200 * time.Millisecond); err == nil {
			t.Fatalf("%s was answered: %q %v", what, got.Data, got.Header)
		}
	}
	forged, _ := json.Marshal(Request{Data: json.RawMessage(`{}`), TimeoutMS: 1000, Caller: Caller{WorkerID: "owner", Engine: "a"}})
	ask("an unsigned call with a forged caller", func(inbox string) *nats.Msg {
		return &nats.Msg{Subject: subject(k), Reply: inbox, Data: forged}
	})
	other := newSigner([]byte("another key of 32 bytes or more.."), "a", slog.New(slog.NewTextHandler(io.Discard, nil)))
	ask("a call signed with another key", func(inbox string) *nats.Msg {
		m := &nats.Msg{Subject: subject(k), Reply: inbox, Data: forged}
		other.sign(m, kindCall, "")
		return m
	})
	ask("a recorded call sent with the recorder's inbox", func(inbox string) *nats.Msg {
		return &nats.Msg{Subject: recorded.Subject, Reply: inbox, Header: recorded.Header, Data: recorded.Data}
	})
	inbox := recorded.Reply
	dropped := a.Dropped()
	if err := nc.PublishMsg(&nats.Msg{Subject: recorded.Subject, Reply: inbox, Header: recorded.Header, Data: recorded.Data}); err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, "the same call played again dropped", 10*time.Second, func() bool { return a.Dropped() > dropped })

	if n := served.Load(); n != before {
		t.Fatalf("outsiders' calls were served: %d", n-before)
	}
	if _, ok := callers.Load("b"); !ok {
		t.Fatal("the engine's call did not carry its engine")
	}
	out := log.String()
	for _, want := range []string{"kind=call", "reason=unsigned"} {
		if !strings.Contains(out, want) {
			t.Errorf("the log lacks %s: %s", want, out)
		}
	}
}

// An outsider's answer to a call, its announcement of an engine, and its answer to a channel
// question are all dropped: the call still times out (never the forged result), the engine is
// never listed, and the channel has no holder; the real holder's answer counts, with the URL
// it announced.
func TestOutsiderAnswersAreDropped(t *testing.T) {
	url := natsURL(t)
	a := join(t, url, "a", testKey, nil, nil)
	b := join(t, url, "b", testKey, nil, nil)
	nc := outsider(t, url)

	ghost := Key{"default", "ghost::fn"}
	_, err := nc.QueueSubscribe(subject(ghost), queueGroup, func(m *nats.Msg) { _ = m.Respond([]byte(`{"result":{"forged":true}}`)) })
	if err != nil {
		t.Fatal(err)
	}
	_, err = nc.Subscribe(channelSubject+"*", func(m *nats.Msg) { _ = m.Respond([]byte("ws://127.0.0.1:9")) })
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	res, perr, found := b.Call(context.Background(), ghost, Request{}, 300*time.Millisecond)
	if !found || perr == nil || perr.Code != errcode.Timeout || res != nil {
		t.Fatalf("a forged answer: %s %v %v", res, perr, found)
	}

	if err := a.ServeChannels("ws://127.0.0.1:1234", func(id string) bool { return id == "held" }); err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, "b knows a's channel URL", 10*time.Second, func() bool {
		e, base := b.ChannelOwner(context.Background(), "held")
		return e == "a" && base == "ws://127.0.0.1:1234"
	})
	if e, base := b.ChannelOwner(context.Background(), "elsewhere"); e != "" || base != "" {
		t.Fatalf("an outsider's channel answer counted: %s %s", e, base)
	}

	dropped := b.Dropped()
	ann, _ := json.Marshal(announcement{Engine: "evil", Functions: []Function{{Namespace: "default", FunctionID: "evil::fn", Engine: "evil"}}, Channels: "ws://127.0.0.1:9"})
	if err := nc.Publish(announceSubject+hex.EncodeToString([]byte("evil")), ann); err != nil {
		t.Fatal(err)
	}
	enginetest.Eventually(t, "the forged announcement dropped", 10*time.Second, func() bool { return b.Dropped() > dropped })
	for _, f := range b.Remote() {
		if f.Engine == "evil" {
			t.Fatalf("a forged engine is listed: %+v", b.Remote())
		}
	}
}

// A call with no goroutine waiting (CallAsync) answers once, as Call does: the serving engine's
// answer; function not found when no engine serves the function; timeout when none answers in
// time, a forged answer on the shared inbox counting for nothing.
func TestCallAsync(t *testing.T) {
	url := natsURL(t)
	serve := func(_ context.Context, k Key, r Request, _ time.Duration, answer func(json.RawMessage, *protocol.Error)) {
		if k.FunctionID == "calc::fail" {
			answer(nil, protocol.NewError(errcode.InvocationFailed, "no"))
			return
		}
		answer(r.Data, nil)
	}
	a := join(t, url, "a", testKey, nil, serve)
	a.Sync([]Function{{Namespace: "default", FunctionID: "calc::echo"}, {Namespace: "default", FunctionID: "calc::fail"}})
	b := join(t, url, "b", testKey, nil, nil)
	nc := outsider(t, url)
	ghost := Key{"default", "ghost::fn"}
	if _, err := nc.QueueSubscribe(subject(ghost), queueGroup, func(m *nats.Msg) { _ = m.Respond([]byte(`{"forged":true}`)) }); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	type outcome struct {
		res   json.RawMessage
		perr  *protocol.Error
		found bool
	}
	call := func(k Key, data string, timeout time.Duration) outcome {
		got := make(chan outcome, 2)
		b.CallAsync(k, Request{Data: json.RawMessage(data)}, timeout, func(res json.RawMessage, perr *protocol.Error, found bool) {
			got <- outcome{res, perr, found}
		})
		o := <-got
		select {
		case again := <-got:
			t.Fatalf("%s answered twice: %+v then %+v", k.FunctionID, o, again)
		case <-time.After(timeout + 100*time.Millisecond):
		}
		return o
	}
	if o := call(Key{"default", "calc::echo"}, `{"n":1}`, time.Second); !o.found || o.perr != nil || string(o.res) != `{"n":1}` {
		t.Fatalf("an echo: %+v", o)
	}
	if o := call(Key{"default", "calc::fail"}, `{}`, time.Second); !o.found || o.perr == nil || o.perr.Code != errcode.InvocationFailed {
		t.Fatalf("a failure: %+v", o)
	}
	if o := call(Key{"default", "calc::none"}, `{}`, time.Second); o.found {
		t.Fatalf("a function no engine serves: %+v", o)
	}
	if o := call(ghost, `{}`, 300*time.Millisecond); !o.found || o.perr == nil || o.perr.Code != errcode.Timeout || o.res != nil {
		t.Fatalf("a forged answer: %+v", o)
	}
}

// A channel connection between engines is admitted once, for the channel and engine it was
// signed for; and its proof of the access key differs with each connection.
func TestHopSignature(t *testing.T) {
	url := natsURL(t)
	a := join(t, url, "a", testKey, nil, nil)
	b := join(t, url, "b", testKey, nil, nil)
	c := join(t, url, "c", []byte("another key of 32 bytes or more.."), nil, nil)

	h := http.Header{}
	nonce := b.SignHop(h, "ch1", "a")
	if got, ok := a.VerifyHop(h, "ch1"); !ok || got != nonce {
		t.Fatalf("a good hop: %v", ok)
	}
	if _, ok := a.VerifyHop(h, "ch1"); ok {
		t.Fatal("a hop played again was admitted")
	}
	h = http.Header{}
	b.SignHop(h, "ch1", "a")
	if _, ok := a.VerifyHop(h, "ch2"); ok {
		t.Fatal("a hop for another channel was admitted")
	}
	h = http.Header{}
	b.SignHop(h, "ch1", "z")
	if _, ok := a.VerifyHop(h, "ch1"); ok {
		t.Fatal("a hop for another engine was admitted")
	}
	h = http.Header{}
	c.SignHop(h, "ch1", "a")
	if _, ok := a.VerifyHop(h, "ch1"); ok {
		t.Fatal("a hop signed with another key was admitted")
	}
	if _, ok := a.VerifyHop(http.Header{hdrAuth: {"1 n s b"}}, "ch1"); ok {
		t.Fatal("an unsigned hop was admitted")
	}
	if HopProof("k", "ch1", "n1") == HopProof("k", "ch1", "n2") || HopProof("k", "ch1", "n1") == HopProof("k2", "ch1", "n1") {
		t.Fatal("a proof does not depend on the nonce and key")
	}
}

// A message signed too long ago is refused even if never seen.
func TestStaleMessageRefused(t *testing.T) {
	s := newSigner(testKey, "a", slog.New(slog.NewTextHandler(io.Discard, nil)))
	subj, body := "iii.fn.x.y", []byte("{}")
	p, _ := s.newProof(kindCall, subj, "", "", "", body)
	if _, _, why := s.check(kindCall, subj, "", "", p, "", body); why != "" {
		t.Fatalf("a fresh message: %q", why)
	}
	// Signed with the key (a recorder without it could not change the time), 2*skew ago.
	old := strconv.FormatInt(time.Now().Add(-2*skew).UnixMilli(), 10)
	nonce := strings.Repeat("0", 32)
	p = proof(old, nonce, base64.RawStdEncoding.EncodeToString(s.mac(nil, kindCall, subj, "", "", "a", old, nonce, "", body)), "a")
	if _, _, why := s.check(kindCall, subj, "", "", p, "", body); !strings.HasPrefix(why, "stale") {
		t.Fatalf("a stale message: %q", why)
	}
	_, _, sig, _, _ := readProof(p)
	p = proof(strconv.FormatInt(time.Now().UnixMilli(), 10), nonce, sig, "a")
	if _, _, why := s.check(kindCall, subj, "", "", p, "", body); why != "bad signature" {
		t.Fatalf("a changed time: %q", why)
	}
}

// A message's proof travels at the start of its body: verify hands on the bytes signed, and a
// body with no proof, a truncated one, or one whose signed bytes were changed is dropped and
// left as it was.
func TestProofInBody(t *testing.T) {
	a := newSigner(testKey, "a", slog.New(slog.NewTextHandler(io.Discard, nil)))
	b := newSigner(testKey, "b", slog.New(slog.NewTextHandler(io.Discard, nil)))
	m := &nats.Msg{Subject: "iii.fn.x.y", Reply: "_INBOX.r", Data: []byte(`{"a":1}`)}
	a.sign(m, kindCall, "")
	if m.Header != nil {
		t.Fatalf("a signed call has headers: %v", m.Header)
	}
	changed := &nats.Msg{Subject: m.Subject, Reply: m.Reply, Data: append(bytes.Clone(m.Data[:len(m.Data)-2]), '2', '}')}
	if engine, _, ok := b.verify(m, kindCall, ""); !ok || engine != "a" || string(m.Data) != `{"a":1}` {
		t.Fatalf("the signed call: %v %q %q", ok, engine, m.Data)
	}
	for _, body := range [][]byte{nil, {}, {0}, {0xff}, {40, 'x'}, []byte(`{"a":1}`), changed.Data} {
		bad := &nats.Msg{Subject: m.Subject, Reply: m.Reply, Data: body}
		if _, _, ok := b.verify(bad, kindCall, ""); ok || !bytes.Equal(bad.Data, body) {
			t.Fatalf("body %q was admitted or changed (%q)", body, bad.Data)
		}
	}
}

// A call's envelope reads back as it was sent, its data untouched, and a truncated or
// malformed one is refused, never read past its end.
func TestCallEnvelope(t *testing.T) {
	k := Key{Namespace: "default", FunctionID: "calc::add"}
	r := Request{Data: json.RawMessage(`{"a":1}`), Metadata: json.RawMessage(`{"m":"x"}`), TimeoutMS: 1500, Traceparent: "00-tp", Baggage: "b=1",
		Caller: Caller{WorkerID: "w1", Name: "n", Namespace: "default", Engine: "a"}}
	m, err := encodeCall(k, r)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeCall(m)
	if err != nil || string(got.Data) != string(r.Data) || string(got.Metadata) != string(r.Metadata) || got.TimeoutMS != r.TimeoutMS ||
		got.Traceparent != r.Traceparent || got.Baggage != r.Baggage || got.Caller != r.Caller {
		t.Fatalf("read back %+v %v", got, err)
	}
	m, _ = encodeCall(k, Request{})
	if got, err := decodeCall(m); err != nil || string(got.Data) != "null" || got.Metadata != nil {
		t.Fatalf("an empty call read back %+v %v", got, err)
	}
	full, _ := encodeCall(k, r)
	for _, body := range [][]byte{nil, {0xff}, {5, 'a'}, full.Data[:3]} {
		if _, err := decodeCall(&nats.Msg{Data: body}); err == nil {
			t.Fatalf("a truncated envelope %q was read", body)
		}
	}
	bad, _ := encodeCall(k, Request{Metadata: json.RawMessage(`{nope`)})
	if _, err := decodeCall(bad); err == nil {
		t.Fatal("metadata that is not JSON was read")
	}
}

// A proof whose signature is not one HMAC-SHA256 long (longer, shorter, not base64) is refused
// as unsigned.
func TestMalformedProofRefused(t *testing.T) {
	s := newSigner(testKey, "a", slog.New(slog.NewTextHandler(io.Discard, nil)))
	ts, nonce := strconv.FormatInt(time.Now().UnixMilli(), 10), strings.Repeat("1", 32)
	for _, sig := range []string{"", "AAAA", strings.Repeat("A", 44), strings.Repeat("A", 400), strings.Repeat("!", 43)} {
		if _, _, why := s.check(kindCall, "iii.fn.x.y", "", "", proof(ts, nonce, sig, "a"), "", nil); why != "unsigned" {
			t.Fatalf("signature %q: %q", sig, why)
		}
	}
}
