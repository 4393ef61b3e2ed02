//go:build !race

package lapi

const raceEnabled = false
