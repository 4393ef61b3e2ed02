module github.com/weft-hpc/weft

go 1.26.0

require github.com/klauspost/cpuid/v2 v2.4.2

require (
	github.com/felixge/fgprof v0.9.3 // indirect
	github.com/google/pprof v0.0.0-20211214055906-6f57359322fd // indirect
	github.com/pkg/profile v1.7.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)
