// Package scripts holds apollo's bundled Lua step modules (http_fetch,
// notify_webhook, csv_check, publish), the LuaLS annotations for the
// apollo.* standard library, and example pipelines in examples/. The modules
// are embedded in the binary: a pipeline step says `uses: publish` and finds
// them after its own modules folders.
package scripts
