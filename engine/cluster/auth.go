package cluster

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/iii-go/iii/internal/base/errcode"
	"github.com/iii-go/iii/internal/base/privfile"
)

// MinKeyBytes is the least a cluster key holds: 32 bytes, the size of the HMAC-SHA256 output.
const MinKeyBytes = 32

// A signed message's proof that an engine of the cluster sent it is "<time> <nonce> <sig>
// <engine>": the time it was signed in Unix milliseconds, 16 bytes in hex that make it accepted
// once, the HMAC-SHA256 (base64, unpadded) of the fields, the subject, reply subject, hdrEnv and
// body (mac), and the sending engine's cluster name, last as it may hold spaces. On NATS it
// starts the message's body (sign), a uvarint length and the proof, not a header: NATS headers
// cost the client a map, a sorted encoding and a textual parse on every message. A hop between
// engines over HTTP carries it in the hdrAuth header.
const (
	hdrAuth = "Iii-Auth"
	// hdrEnv is an answer's error (JSON); absent from every other message.
	hdrEnv = "Iii-Env"
)

// The kinds of signed message; the kind is part of what is signed, so that a message signed as
// one kind is never accepted as another.
const (
	kindCall     = "call"      // a function call, on iii.fn.…
	kindReply    = "reply"     // its answer, on the caller's inbox
	kindAnnounce = "announce"  // an engine's offer, on iii.engines.fn.…
	kindAskChan  = "ask-chan"  // which engine holds a channel, on iii.ch.…
	kindChanHere = "chan-here" // the holder's answer, on the asker's inbox
	kindHop      = "hop"       // a channel connection one engine opens to another (over HTTP)
)

// skew is how far a signed message's time may be from this engine's clock. A message is
// accepted once within it (its nonce is remembered until then) and never past it, so a
// recorded message cannot be played again; the engines' clocks must agree within it.
const skew = 30 * time.Second

// dropLogEvery rate-limits the warning about dropped messages: one line at most this often,
// with the count since the last.
const dropLogEvery = 10 * time.Second

// LoadKey reads the cluster key from path (config key cluster.key_file): a regular file of the
// user's own, mode 0600, holding at least MinKeyBytes bytes once surrounding white space is
// trimmed. The key's bytes are never logged nor put into an error.
func LoadKey(path string) ([]byte, error) {
	if path == "" {
		return nil, errcode.New(errcode.ConfigInvalid, "cluster.key_file is required: the file holding the key the engines of the cluster share")
	}
	if err := privfile.Check(path, false); err != nil {
		return nil, errcode.New(errcode.ConfigInvalid, "cluster.key_file: %w", err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, errcode.New(errcode.ConfigInvalid, "cluster.key_file: reading %s: %w", path, err)
	}
	b = bytes.TrimSpace(b)
	if len(b) < MinKeyBytes {
		return nil, errcode.New(errcode.ConfigInvalid, "cluster.key_file: %s holds %d bytes; a cluster key needs at least %d (e.g. head -c 32 /dev/urandom | base64)", path, len(b), MinKeyBytes)
	}
	return b, nil
}

// signer signs what this engine sends to the cluster and checks what it receives.
type signer struct {
	key  []byte
	name string
	log  *slog.Logger

	macs      sync.Pool // of *macState keyed with key, reset after each use
	nonceBase [8]byte   // random, drawn once (newNonce)
	nonces    atomic.Uint64

	mu sync.Mutex
	// seen holds the nonces accepted, with until when (Unix ms) they are remembered: keys and
	// values without pointers, so that the collector does not scan the many a busy cluster
	// accepts within skew.
	seen map[[16]byte]int64
	pru  time.Time // last time seen was pruned

	dropped atomic.Uint64 // messages dropped since the engine joined
	logMu   sync.Mutex
	logs    map[string]*dropLog // by kind
}

// dropLog is the warning state of one kind of dropped message.
type dropLog struct {
	at      time.Time // of the last warning
	n, told uint64    // dropped, and dropped at the last warning
}

func newSigner(key []byte, name string, log *slog.Logger) *signer {
	s := &signer{key: key, name: name, log: log, seen: map[[16]byte]int64{}, logs: map[string]*dropLog{}}
	s.macs.New = func() any { return &macState{h: hmac.New(sha256.New, key), b: make([]byte, 0, 256)} }
	_, _ = rand.Read(s.nonceBase[:])
	return s
}

// macState is a keyed HMAC-SHA256 and the buffer its fields are laid out in, kept between
// messages so that signing and checking allocate neither.
type macState struct {
	h hash.Hash
	b []byte
}

// mac is the HMAC-SHA256, under the cluster key, of every field, each preceded by its length,
// appended to dst. env is the message's hdrEnv header; the body is the message's bytes as sent,
// signed once, never re-encoded.
func (s *signer) mac(dst []byte, kind, subject, reply, inReplyTo, engine, ts, nonce, env string, body []byte) []byte {
	m := s.macs.Get().(*macState)
	defer s.macs.Put(m)
	b := m.b[:0]
	for _, f := range [...]string{macVersion, kind, subject, reply, inReplyTo, engine, ts, nonce, env} {
		b = binary.AppendUvarint(b, uint64(len(f)))
		b = append(b, f...)
	}
	b = binary.AppendUvarint(b, uint64(len(body)))
	m.h.Reset()
	m.h.Write(b)
	m.h.Write(body)
	if cap(b) <= 1024 { // keeps no buffer a rare long subject grew
		m.b = b
	}
	return m.h.Sum(dst)
}

// macVersion starts what is signed; it changes with the layout of the messages, so that an
// engine of another layout is refused (bad signature) rather than misread.
const macVersion = "iii-cluster/3"

// sign puts this engine's proof at the start of m's body, as a message of kind answering the
// one of nonce inReplyTo ("" for none), and returns m's own nonce. Set m's hdrEnv header
// before: it is signed.
func (s *signer) sign(m *nats.Msg, kind, inReplyTo string) string {
	p, nonce := s.newProof(kind, m.Subject, m.Reply, inReplyTo, m.Header.Get(hdrEnv), m.Data)
	body := make([]byte, 0, binary.MaxVarintLen64+len(p)+len(m.Data))
	body = binary.AppendUvarint(body, uint64(len(p)))
	m.Data = append(append(body, p...), m.Data...)
	return nonce
}

// newProof is this engine's proof of a message of kind with these fields, and its nonce.
func (s *signer) newProof(kind, subject, reply, inReplyTo, env string, body []byte) (p, nonce string) {
	nonce = s.newNonce()
	ts := strconv.FormatInt(time.Now().UnixMilli(), 10)
	var sum [sha256.Size]byte
	sig := s.mac(sum[:0], kind, subject, reply, inReplyTo, s.name, ts, nonce, env, body)
	return proof(ts, nonce, base64.RawStdEncoding.EncodeToString(sig), s.name), nonce
}

// splitProof separates the proof that starts a signed message's body (sign) from the bytes
// signed; ok is false when the body starts with none.
func splitProof(b []byte) (p string, body []byte, ok bool) {
	n, used := binary.Uvarint(b)
	if used <= 0 || n == 0 || n > uint64(len(b)-used) {
		return "", nil, false
	}
	return string(b[used : used+int(n)]), b[used+int(n):], true
}

// proof is the hdrAuth header of the message engine signed at ts with nonce and sig.
func proof(ts, nonce, sig, engine string) string {
	return ts + " " + nonce + " " + sig + " " + engine
}

// readProof splits a hdrAuth header into its fields; ok is false when it has not all four.
func readProof(v string) (ts, nonce, sig, engine string, ok bool) {
	ts, rest, ok1 := strings.Cut(v, " ")
	nonce, rest, ok2 := strings.Cut(rest, " ")
	sig, engine, ok3 := strings.Cut(rest, " ")
	return ts, nonce, sig, engine, ok1 && ok2 && ok3
}

// verify checks that m is a message of kind, answering inReplyTo, signed by an engine of the
// cluster, recent, and not seen before; it returns the signing engine's name and m's nonce,
// and leaves in m's body the bytes signed, without the proof. Anything else is dropped,
// counted and (rate-limited) logged, and m left as it was.
func (s *signer) verify(m *nats.Msg, kind, inReplyTo string) (engine, nonce string, ok bool) {
	p, body, signed := splitProof(m.Data)
	why := "unsigned"
	if signed {
		engine, nonce, why = s.check(kind, m.Subject, m.Reply, inReplyTo, p, m.Header.Get(hdrEnv), body)
	}
	if why != "" {
		s.drop(kind, m.Subject, why)
		return "", "", false
	}
	m.Data = body
	return engine, nonce, true
}

// check is verify of the proof p of a message with these fields, without the dropping: the
// reason it is refused, "" when it is not.
func (s *signer) check(kind, subject, reply, inReplyTo, p, env string, body []byte) (engine, nonce, why string) {
	ts, nonce, sig64, engine, ok := readProof(p)
	if !ok || base64.RawStdEncoding.DecodedLen(len(sig64)) != sha256.Size || engine == "" || ts == "" || len(nonce) != 32 {
		return "", "", "unsigned"
	}
	var sig, want [sha256.Size]byte // the length is checked first: Decode writes DecodedLen bytes
	if n, err := base64.RawStdEncoding.Decode(sig[:], []byte(sig64)); err != nil || n != sha256.Size {
		return "", "", "unsigned"
	}
	if !hmac.Equal(sig[:], s.mac(want[:0], kind, subject, reply, inReplyTo, engine, ts, nonce, env, body)) {
		return "", "", "bad signature"
	}
	ms, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return "", "", "bad time"
	}
	now, signed := time.Now(), time.UnixMilli(ms)
	if d := now.Sub(signed); d > skew || d < -skew {
		return "", "", "stale (signed " + signed.UTC().Format(time.RFC3339) + ")"
	}
	if inReplyTo != "" {
		// An answer is bound to its question's nonce, and its question takes one answer
		// (replies.go): playing it again reaches nobody, so it need not be remembered.
		return engine, nonce, ""
	}
	var key [16]byte
	if _, err := hex.Decode(key[:], []byte(nonce)); err != nil {
		return "", "", "unsigned"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if now.Sub(s.pru) > skew {
		for n, until := range s.seen {
			if now.UnixMilli() > until {
				delete(s.seen, n)
			}
		}
		s.pru = now
	}
	if _, dup := s.seen[key]; dup {
		return "", "", "replayed"
	}
	s.seen[key] = signed.Add(skew).UnixMilli() // past it, the time check refuses the message anyway
	return engine, nonce, ""
}

// drop counts a refused message and warns about it, at most once every dropLogEvery for each
// kind of message.
func (s *signer) drop(kind, subject, why string) {
	s.dropped.Add(1)
	s.logMu.Lock()
	defer s.logMu.Unlock()
	l := s.logs[kind]
	if l == nil {
		l = &dropLog{}
		s.logs[kind] = l
	}
	l.n++
	if time.Since(l.at) < dropLogEvery {
		return
	}
	s.log.Warn("cluster: dropped a message not signed by an engine of the cluster (a NATS client without the cluster key, or an engine with another key)",
		"kind", kind, "subject", subject, "reason", why, "dropped", l.n-l.told, "total", l.n)
	l.at, l.told = time.Now(), l.n
}

// newNonce is a nonce no other message of this engine has: a random prefix drawn when the
// engine joined and a count, so that signing draws no randomness per message.
func (s *signer) newNonce() string {
	var b [16]byte
	copy(b[:8], s.nonceBase[:])
	binary.BigEndian.PutUint64(b[8:], s.nonces.Add(1))
	return hex.EncodeToString(b[:])
}

// SignHop adds to h this engine's proof that it opens, as an engine of the cluster, a
// connection to channel id on the engine named owner, and returns the connection's nonce (for
// HopProof).
func (c *Cluster) SignHop(h http.Header, id, owner string) string {
	p, nonce := c.auth.newProof(kindHop, hopSubject(id), owner, "", "", nil)
	h.Set(hdrAuth, p)
	return nonce
}

// VerifyHop checks that h carries the proof of an engine of the cluster that opens a connection
// to channel id on this engine (SignHop), recent and not seen before; it returns the nonce the
// connection's HopProof is made with. A request that fails is counted and logged as dropped.
func (c *Cluster) VerifyHop(h http.Header, id string) (nonce string, ok bool) {
	_, nonce, why := c.auth.check(kindHop, hopSubject(id), c.name, "", h.Get(hdrAuth), h.Get(hdrEnv), nil)
	if why != "" {
		c.auth.drop(kindHop, hopSubject(id), why)
		return "", false
	}
	return nonce, true
}

// HopProof stands for a channel's access key on a connection between engines: an HMAC-SHA256,
// under the key, of the channel and the connection's nonce. The engine holding the channel
// computes it from each of the channel's keys and compares, so the key itself never leaves the
// engine the end connected to, and a proof is good for one connection only.
func HopProof(accessKey, id, nonce string) string {
	h := hmac.New(sha256.New, []byte(accessKey))
	h.Write([]byte("iii-channel-hop\x00" + id + "\x00" + nonce))
	return hex.EncodeToString(h.Sum(nil))
}

func hopSubject(id string) string { return "/ws/channels/" + id }
