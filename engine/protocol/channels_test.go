package protocol

import (
	"context"
	"strings"
	"testing"
)

func TestChannelURL(t *testing.T) {
	ref := ChannelRef{ChannelID: "c-1", AccessKey: "k", Direction: "read"}
	for in, want := range map[string]string{
		"ws://127.0.0.1:49134":       "ws://127.0.0.1:49134/ws/channels/c-1?key=k",
		"ws://127.0.0.1:49134/":      "ws://127.0.0.1:49134/ws/channels/c-1?key=k",
		"http://h:1/x?y=1":           "ws://h:1/ws/channels/c-1?key=k",
		"wss://example.com":          "wss://example.com/ws/channels/c-1?key=k",
		"https://example.com:8443/a": "wss://example.com:8443/ws/channels/c-1?key=k",
	} {
		got, err := ChannelURL(in, ref)
		if err != nil || got != want {
			t.Errorf("%s: got %q %v, want %q", in, got, err, want)
		}
	}
	if _, err := ChannelURL("ftp://x", ref); err == nil {
		t.Error("ftp accepted")
	}
}

func TestDialChecksDirection(t *testing.T) {
	ref := ChannelRef{ChannelID: "c", AccessKey: "k", Direction: ChannelRead}
	if _, err := DialWriter(context.Background(), "ws://127.0.0.1:1", ref); err == nil || !strings.Contains(err.Error(), "direction") {
		t.Fatalf("read ref opened as a writer: %v", err)
	}
	if _, err := DialReader(context.Background(), "ws://127.0.0.1:1", ChannelRef{Direction: ChannelRead}); err == nil {
		t.Fatal("empty ref accepted")
	}
}
