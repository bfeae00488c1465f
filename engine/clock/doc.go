// Package clock is the engine's time: the current time, timers and tickers.
// The engine takes a Clock as an option, so that tests of retry delays and
// of the progress board move time themselves instead of sleeping.
package clock
