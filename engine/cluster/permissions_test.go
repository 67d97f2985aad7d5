package cluster

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/iii-go/iii/engine/enginetest"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
)

// engineSubjects are the subjects the README tells to reserve to the engines' NATS user.
var engineSubjects = []string{"iii.fn.>", "iii.ch.>", "iii.engines.>", "_INBOX.>"}

// nkeyUser makes an nkey user, its seed written to a mode-0600 file in dir.
func nkeyUser(t *testing.T, dir, name string) (pub, seedFile string) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ = kp.PublicKey()
	seed, _ := kp.Seed()
	seedFile = filepath.Join(dir, name+".nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	return pub, seedFile
}

// The NATS permissions the README documents are enough for engines with nkey credentials (no
// insecure, no warning) to call each other, list each other and find a channel's holder; and
// a user without them can neither publish nor subscribe to the engines' subjects.
func TestDocumentedPermissionsSuffice(t *testing.T) {
	dir := t.TempDir()
	enginePub, engineSeed := nkeyUser(t, dir, "engines")
	otherPub, otherSeed := nkeyUser(t, dir, "other")
	s, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true, Nkeys: []*natsserver.NkeyUser{
		{Nkey: enginePub, Permissions: &natsserver.Permissions{
			Publish: &natsserver.SubjectPermission{Allow: engineSubjects}, Subscribe: &natsserver.SubjectPermission{Allow: engineSubjects}}},
		{Nkey: otherPub, Permissions: &natsserver.Permissions{
			Publish:   &natsserver.SubjectPermission{Allow: []string{">"}, Deny: engineSubjects},
			Subscribe: &natsserver.SubjectPermission{Allow: []string{">"}, Deny: engineSubjects}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	t.Cleanup(s.Shutdown)
	url := s.ClientURL()

	var log syncBuf
	serve := func(_ context.Context, k Key, _ Request, _ time.Duration, answer func(json.RawMessage, *protocol.Error)) {
		answer(json.RawMessage(`{"served":"`+k.FunctionID+`"}`), nil)
	}
	connect := func(name string, w io.Writer) *Cluster {
		c, err := Connect(Options{URL: url, NkeyFile: engineSeed, Name: name, Key: testKey, Logger: slog.New(slog.NewTextHandler(w, nil))}, serve)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	if err := os.Chmod(engineSeed, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Connect(Options{URL: url, NkeyFile: engineSeed, Name: "a", Key: testKey}, serve)
	if errcode.CodeOf(err) != errcode.ConfigInvalid || !strings.Contains(err.Error(), "cluster.nats.nkey_file: "+engineSeed+" has mode 0644; it must be 0600") {
		t.Fatalf("a seed others may read: %v", err)
	}
	if err := os.Chmod(engineSeed, 0o600); err != nil {
		t.Fatal(err)
	}
	a, b := connect("a", &log), connect("b", io.Discard)
	k := Key{"default", "calc::add"}
	a.Sync([]Function{{Namespace: k.Namespace, FunctionID: k.FunctionID}})
	if err := a.ServeChannels("ws://127.0.0.1:1234", func(id string) bool { return id == "held" }); err != nil {
		t.Fatal(err)
	}
	var res json.RawMessage
	enginetest.Eventually(t, "b calls a's function", 10*time.Second, func() bool {
		r, perr, found := b.Call(context.Background(), k, Request{}, time.Second)
		res = r
		return found && perr == nil
	})
	if string(res) != `{"served":"calc::add"}` {
		t.Fatalf("%s", res)
	}
	enginetest.Eventually(t, "b lists a's function", 10*time.Second, func() bool { r := b.Remote(); return len(r) == 1 && r[0].Engine == "a" })
	enginetest.Eventually(t, "b finds a's channel", 10*time.Second, func() bool {
		e, u := b.ChannelOwner(context.Background(), "held")
		return e == "a" && u == "ws://127.0.0.1:1234"
	})
	if strings.Contains(log.String(), "without credentials") || strings.Contains(log.String(), "dropped") {
		t.Fatalf("unexpected warnings: %s", log.String())
	}

	denied := make(chan error, 8)
	nk, err := nats.NkeyOptionFromSeed(otherSeed)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(url, nk, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { denied <- err }))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := nc.SubscribeSync("iii.fn.>"); err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish(subject(k), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	_ = nc.Flush()
	for _, what := range []string{"Subscription", "Publish"} {
		select {
		case err := <-denied:
			if !strings.Contains(err.Error(), "Permissions Violation") {
				t.Fatalf("%s: %v", what, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the other user's %s was not refused", what)
		}
	}
}
