-- want: timed out after 1s
-- isolation: process
return (("a"):rep(30) .. "b"):find(("a*"):rep(30) .. "c")
