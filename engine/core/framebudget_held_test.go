package core

// framesHeld is how many bytes of the engine's frame budget are held.
func framesHeld(e *Engine) int64 { return e.frames.inUse() }
