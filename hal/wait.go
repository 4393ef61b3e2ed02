package hal

import "context"

// WaitAny is Wait over several devices, for a device made of several (a
// stripe, a route). It returns nil as soon as one device's Wait does,
// ctx.Err() when ctx is done first, and when every device's Wait fails,
// the last of their errors. The first device waits in the calling
// goroutine and every other in a goroutine of its own for the length of
// the call; all of them have returned when WaitAny does, so none races
// with a Close that follows.
func WaitAny(ctx context.Context, devs ...Device) error {
	switch len(devs) {
	case 0:
		return ErrClosed
	case 1:
		return devs[0].Wait(ctx)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	res := make(chan error, len(devs)-1)
	for _, d := range devs[1:] {
		go func() {
			err := d.Wait(wctx)
			if err == nil {
				cancel() // the caller's device wakes at once
			}
			res <- err
		}()
	}
	woke := false
	var last error
	note := func(err error) {
		if err == nil {
			woke = true
			cancel()
		} else {
			last = err
		}
	}
	note(devs[0].Wait(wctx))
	for range len(devs) - 1 {
		note(<-res)
	}
	switch {
	case woke:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return last
}
