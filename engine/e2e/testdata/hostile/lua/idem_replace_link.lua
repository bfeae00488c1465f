-- want: lua/idem_replace_link.lua:2: idem.replace: path "link/pwned.jsonl" is outside the workspace
require("apollo.idem").replace("link/pwned.jsonl", "k", {{a = 1}})
