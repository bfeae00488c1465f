print(#require("apollo.state").steps())
