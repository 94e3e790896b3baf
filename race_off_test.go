//go:build !race

package mha

const raceEnabled = false
