package core

import (
	"context"
	"crypto/subtle"
	"errors"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"

	"github.com/coder/websocket"

	"github.com/iii-go/iii/engine/cluster"
	"github.com/iii-go/iii/engine/protocol"
)

// hopHeader marks a channel connection one engine of the cluster opened to another on behalf
// of a client: it is served where it lands, never proxied again.
const hopHeader = "X-III-Cluster-Hop"

// AdvertiseURL is the WebSocket base URL other engines of a cluster dial to reach this engine's
// channels, made from the listener's address: ws://host:port, with the machine's host name for
// an unspecified address (0.0.0.0, ::).
func AdvertiseURL(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "ws://" + addr
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		if h, err := os.Hostname(); err == nil {
			host = h
		}
	}
	return "ws://" + net.JoinHostPort(host, port)
}

// ServeClusterChannels tells the other engines of the cluster which stream channels this
// engine holds, so that an end connecting to one of them is proxied here; advertise is this
// engine's base URL for them (AdvertiseURL).
func (e *Engine) ServeClusterChannels(advertise string) error {
	if e.cluster == nil {
		return nil
	}
	return e.cluster.ServeChannels(advertise, e.chans.Has)
}

// hopProofParam is the query parameter that carries, on a connection between engines, the
// proof of the access key (cluster.HopProof) in place of the key.
const hopProofParam = "proof"

// channelEnd is the end of channel id, whose ends' keys are keys (reader, writer), that the
// request r may connect: the index of its key, -1 for none. A client presents the end's access key (?key=). An engine of the cluster relaying a
// client's end presents instead a proof of that key for this connection (?proof=), which counts
// only with a valid signature of the cluster (cluster.VerifyHop); so only engines may relay,
// and the key itself never leaves the engine the client connected to.
func (e *Engine) channelEnd(keys [2]string, id string, r *http.Request) int {
	end := -1
	if r.Header.Get(hopHeader) != "" && e.cluster != nil {
		nonce, ok := e.cluster.VerifyHop(r.Header, id)
		if !ok {
			return -1
		}
		proof := []byte(r.URL.Query().Get(hopProofParam))
		for i, k := range keys {
			if subtle.ConstantTimeCompare([]byte(cluster.HopProof(k, id, nonce)), proof) == 1 {
				end = i
			}
		}
		return end
	}
	key := []byte(r.URL.Query().Get("key"))
	for i, k := range keys {
		if subtle.ConstantTimeCompare([]byte(k), key) == 1 {
			end = i
		}
	}
	return end
}

// proxyChannel connects an end of a channel another engine of the cluster holds: it dials that
// engine's /ws/channels/{id}, at the channel URL that engine announced, with a proof of the key
// (channelEnd) and relays every frame both ways, opcodes kept, until either side closes. It
// reports false when no engine holds the channel.
func (e *Engine) proxyChannel(w http.ResponseWriter, r *http.Request, id string, l *listener) bool {
	if e.cluster == nil || r.Header.Get(hopHeader) != "" {
		return false
	}
	engine, base := e.cluster.ChannelOwner(r.Context(), id)
	if base == "" {
		return false
	}
	h := http.Header{hopHeader: {e.cluster.Name()}}
	proof := cluster.HopProof(r.URL.Query().Get("key"), id, e.cluster.SignHop(h, id, engine))
	target := base + "/ws/channels/" + url.PathEscape(id) + "?" + hopProofParam + "=" + proof
	up, resp, err := websocket.Dial(r.Context(), target, &websocket.DialOptions{HTTPHeader: h})
	if err != nil {
		status := http.StatusBadGateway
		if resp != nil && resp.StatusCode >= 400 {
			status = resp.StatusCode // 403 wrong key, 409 end taken: the owner's answer
		}
		http.Error(w, "channel "+id+" is on engine "+engine+": "+strconv.Itoa(status)+" "+http.StatusText(status), status)
		return true
	}
	down, err := websocket.Accept(w, r, acceptOptions(l))
	if err != nil {
		up.CloseNow()
		return true
	}
	up.SetReadLimit(protocol.MaxFrameBytes)
	down.SetReadLimit(protocol.MaxFrameBytes)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{}, 2)
	go func() { relay(ctx, down, up); done <- struct{}{} }()
	go func() { relay(ctx, up, down); done <- struct{}{} }()
	<-done
	cancel()
	<-done
	return true
}

// relay copies frames from src to dst until src ends, then closes dst as src was closed.
func relay(ctx context.Context, src, dst *websocket.Conn) {
	for {
		typ, b, err := src.Read(ctx)
		if err != nil {
			var ce websocket.CloseError
			if errors.As(err, &ce) {
				_ = dst.Close(ce.Code, ce.Reason)
			} else {
				_ = dst.Close(websocket.StatusGoingAway, "the other engine's end went away")
			}
			return
		}
		if err := dst.Write(ctx, typ, b); err != nil {
			_ = src.Close(websocket.StatusGoingAway, "the other engine's end went away")
			return
		}
	}
}
