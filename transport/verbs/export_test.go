//go:build verbs && linux && cgo

package verbs

// The test helpers the external tests (package verbs_test) share.
var (
	RxeDevs  = rxeDevs
	RxePairs = rxePairs
)
