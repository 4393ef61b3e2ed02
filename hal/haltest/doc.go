// Package haltest is the conformance suite every hal.Device implementation
// runs from its own tests, so that inproc, udp, shm, verbs, the simulated
// network and the fault wrapper keep one behaviour the layers above can rely
// on. The API is two names:
//
//	func TestConformance(t *testing.T) {
//		haltest.Run(t, func(t *testing.T, size int) haltest.Net {
//			f := inproc.NewFabric(size, jobKey)
//			devs := make([]hal.Device, size)
//			for r := range devs {
//				d, err := f.Open(hal.Rank(r))
//				if err != nil {
//					t.Fatal(err)
//				}
//				t.Cleanup(func() { d.Close() })
//				devs[r] = d
//			}
//			return haltest.Net{Devs: devs, JobKey: jobKey}
//		})
//	}
//
// The open function makes a fresh job of size ranks for each subtest: one
// device per rank, opened for rank r of size with the job key it reports in
// Net.JobKey, fault injection off, closed by t.Cleanup (the suite closes
// some itself; a second Close returning hal.ErrClosed is expected). The suite
// connects every pair itself, with each device's Addr. Devices on a simulated
// clock set Net.Advance; devices on real time leave it nil and the suite
// blocks in Wait, bounded by a timeout, never by sleeping.
//
// What the suite checks is listed in Run's documentation.
//
// # Imports
//
// haltest imports hal, testing and the standard library only.
package haltest
