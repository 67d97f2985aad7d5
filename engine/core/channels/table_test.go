package channels

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/iii-go/iii/engine/enginetest"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
)

// serve is an HTTP server of t's /ws/channels/ endpoint, whose requests prove their end with
// ?key= as a client's do; it returns the server's ws:// base URL.
func serve(tb testing.TB, t *Table) string {
	tb.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := strings.CutPrefix(r.URL.Path, protocol.ChannelPathPrefix)
		if !ok {
			http.NotFound(w, r)
			return
		}
		t.Serve(w, r, id, Connect{End: func(keys [2]string) int {
			key := []byte(r.URL.Query().Get("key"))
			for i, k := range keys {
				if subtle.ConstantTimeCompare([]byte(k), key) == 1 {
					return i
				}
			}
			return -1
		}})
	}))
	tb.Cleanup(func() {
		t.CloseAll(time.Second)
		srv.Close()
	})
	return "ws" + strings.TrimPrefix(srv.URL, "http")
}

func limits() Limits {
	return Limits{Idle: DefaultIdle, Attach: time.Minute, Bytes: 1 << 20, Budget: 4 << 20, Max: 8, Share: 4, GatedShare: 1}
}

func pair(t *testing.T, cs *Table, by Creator) protocol.ChannelPair {
	t.Helper()
	out, err := cs.Create(context.Background(), by, nil)
	if err != nil {
		t.Fatal(err)
	}
	return out.(protocol.ChannelPair)
}

// A channel whose reader and writer are both connected outlives the idle deadline (a quiet
// terminal's output); one with an end missing does not.
func TestIdleKeepsConnectedChannels(t *testing.T) {
	cs := New(limits())
	url := serve(t, cs)
	ctx := context.Background()
	p := pair(t, cs, Creator{})
	rd, err := protocol.DialReader(ctx, url, p.Reader)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	wr, err := protocol.DialWriter(ctx, url, p.Writer)
	if err != nil {
		t.Fatal(err)
	}
	half := pair(t, cs, Creator{})
	hr, err := protocol.DialReader(ctx, url, half.Reader)
	if err != nil {
		t.Fatal(err)
	}
	defer hr.Close()
	enginetest.Eventually(t, "both ends of the first channel connected", 5*time.Second, func() bool {
		cs.mu.Lock()
		defer cs.mu.Unlock()
		ch := cs.byID[p.ChannelID]
		ch.mu.Lock()
		defer ch.mu.Unlock()
		return ch.bothConnected()
	})
	cs.Expire(time.Now().Add(DefaultIdle + time.Hour))
	if n := cs.Live(); n != 1 {
		t.Fatalf("after the idle deadline the table holds %d channels, want 1", n)
	}
	if _, err := wr.Write([]byte("still here")); err != nil {
		t.Fatal(err)
	}
	wr.Close()
	got, err := io.ReadAll(rd)
	if err != nil || string(got) != "still here" {
		t.Fatalf("after the idle deadline: %q, %v", got, err)
	}
	_, err = hr.Read(make([]byte, 1))
	var ae *protocol.ChannelAbortedError
	if !errors.As(err, &ae) || !strings.Contains(ae.Detail, "idle") {
		t.Fatalf("the channel without a writer: %v", err)
	}
}

// The table's limits: one connection holds at most its share, a gated session its smaller
// one, all or none of a create_many, and a creator's channels count again once forgotten.
func TestShares(t *testing.T) {
	cs := New(limits())
	ctx := context.Background()
	many := func(by Creator, n int) error {
		_, err := cs.CreateMany(ctx, by, json.RawMessage(fmt.Sprintf(`{"count":%d}`, n)))
		return err
	}
	limited := func(err error) bool {
		var pe *protocol.Error
		return errors.As(err, &pe) && pe.Code == errcode.ChannelLimit
	}
	if err := many(Creator{ID: "w1"}, 5); !limited(err) {
		t.Fatalf("5 channels for a share of 4: %v", err)
	}
	if cs.Live() != 0 {
		t.Fatalf("a refused create_many left %d channels", cs.Live())
	}
	if err := many(Creator{ID: "w1"}, 4); err != nil {
		t.Fatal(err)
	}
	if err := many(Creator{ID: "s1", Gated: true}, 1); err != nil {
		t.Fatal(err)
	}
	if err := many(Creator{ID: "s1", Gated: true}, 1); !limited(err) {
		t.Fatalf("a second channel for a gated share of 1: %v", err)
	}
	cs.CreatorLeft("s1")
	if err := many(Creator{ID: "s1", Gated: true}, 1); err != nil {
		t.Fatalf("after the session left, its channel was not forgotten: %v", err)
	}
	if err := many(Creator{}, 4); !limited(err) { // 5 held, Max 8
		t.Fatalf("the engine's own calls past Max: %v", err)
	}
	if err := many(Creator{}, 3); err != nil {
		t.Fatal(err)
	}
}
