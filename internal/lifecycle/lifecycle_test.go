package lifecycle

import "testing"

// TestGuard: Close while a call is inside does not release; the call's
// Leave does, once; calls after Close are refused; a second Close reports
// false and wakes nobody.
func TestGuard(t *testing.T) {
	released, woken := 0, 0
	g := &Guard{Release: func() { released++ }}
	if !g.Enter() {
		t.Fatal("Enter refused before Close")
	}
	if !g.Enter() { // nested
		t.Fatal("nested Enter refused")
	}
	if !g.Close(func() { woken++ }) || woken != 1 || !g.Closed() {
		t.Fatalf("Close: woken %d, closed %v", woken, g.Closed())
	}
	if released != 0 {
		t.Fatal("released while calls were inside")
	}
	if g.Enter() {
		t.Fatal("Enter admitted after Close")
	}
	g.Leave()
	if released != 0 {
		t.Fatal("released while the outer call was still inside")
	}
	g.Leave()
	if released != 1 {
		t.Fatalf("released %d times after the last Leave, want 1", released)
	}
	if g.Close(func() { woken++ }) || woken != 1 || released != 1 {
		t.Fatalf("second Close: woken %d, released %d", woken, released)
	}
}
