package core

import (
	"encoding/json"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
)

// FnQueueEnqueue is the function of the queue worker that takes invocations with action
// enqueue: {queue, function_id, namespace, data, metadata?} -> {messageReceiptId}.
const FnQueueEnqueue = "queue::enqueue"

// enqueue hands an invocation with action {type: enqueue, queue} to the queue worker serving
// the call's namespace (else default); its answer ({messageReceiptId} once the message is
// stored) is the caller's result. With no queue worker the call fails enqueue_error.
func (e *Engine) enqueue(c *conn, m *protocol.Message) {
	ns := m.NamespaceOr(protocol.DefaultNamespace)
	e.mu.RLock()
	f := e.funcs[fkey{ns, FnQueueEnqueue}].pick()
	if f == nil {
		f = e.funcs[fkey{protocol.DefaultNamespace, FnQueueEnqueue}].pick()
	}
	e.mu.RUnlock()
	if f == nil {
		c.sendResult(m, nil, protocol.NewError(errcode.EnqueueError,
			"cannot enqueue %s on queue '%s': no queue worker serves namespace '%s' (action enqueue needs one: add the queue worker to worker-compose.yaml); call it without an action, or as void",
			m.FunctionID, m.Action.Queue, ns))
		return
	}
	data := m.Data
	if len(data) == 0 {
		data = json.RawMessage("null")
	}
	payload, _ := json.Marshal(map[string]any{"queue": m.Action.Queue, "function_id": m.FunctionID, "namespace": ns,
		"data": data, "metadata": m.Metadata})
	timeout := e.callTimeout(m.TimeoutMS)
	if m.IsVoid() || m.InvocationID == "" {
		_, _ = e.startForward(f.conn, FnQueueEnqueue, payload, nil, traceCtx{m.Traceparent, m.Baggage}, timeout, nil)
		return
	}
	pc := &pendingCall{caller: c, callerID: m.InvocationID}
	if _, perr := e.startForward(f.conn, FnQueueEnqueue, payload, nil, traceCtx{m.Traceparent, m.Baggage}, timeout, pc); perr != nil {
		pc.fn = m.FunctionID
		pc.deliver(nil, protocol.NewError(errcode.EnqueueError, "cannot enqueue %s on queue '%s': %s", m.FunctionID, m.Action.Queue, perr.Message))
	}
}
