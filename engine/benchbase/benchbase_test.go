package benchbase

import (
	"net"
	"testing"
)

// TestEchoRoundTrip: a client gets a reply to each call from the echo server, and calls per
// CPU-second are measurable (CPUTime moves forward on Unix).
func TestEchoRoundTrip(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { _ = ServeEcho(ln) }()
	ec, err := DialEcho("ws://" + ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer ec.Close()
	cpu0 := CPUTime()
	for i := range 100 {
		if err := ec.Call(); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if cpu := CPUTime(); cpu < cpu0 {
		t.Fatalf("CPUTime went back: %v then %v", cpu0, cpu)
	}
}
