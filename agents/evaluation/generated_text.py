"""Words and phrases the generated dataset is made of (``agents.evaluation.generated``).

Everyday topics a user talks over with an assistant, each with openers, follow-ups and the
sentences the assistant answers with; the people, places and things of a user's life.
"""

from __future__ import annotations

FEMALE = (
    "Maya", "Ines", "Leila", "Clara", "Sofia", "Hannah", "Priya", "Marta", "Yuki", "Elena", "Amara",
    "Greta", "Noor", "Freya", "Rosa", "Lucia", "Ingrid", "Zara", "Chloe", "Mei",
)
MALE = (
    "Tomas", "Jonas", "Ravi", "Mateo", "Oskar", "Luca", "Samir", "Felix", "Kenji", "Daniel", "Emeka",
    "Anton", "Pavel", "Hugo", "Nils", "Omar", "Bruno", "Theo", "Arjun", "Milan",
)
USERS = ("Alex", "Sam", "Robin", "Jamie", "Kai", "Noa", "Charlie", "Eli", "Jordan", "Rene")

#: (relation, gender): "f", "m", or "" when either.
RELATIONS = (
    ("sister", "f"), ("brother", "m"), ("mother", "f"), ("father", "m"), ("cousin", ""), ("best friend", ""),
    ("neighbour", ""), ("colleague", ""), ("boss", ""), ("flatmate", ""), ("aunt", "f"), ("uncle", "m"),
    ("niece", "f"), ("nephew", "m"), ("grandmother", "f"), ("godson", "m"),
)

CITIES = (
    "Lyon", "Porto", "Ghent", "Bergen", "Leipzig", "Bologna", "Tallinn", "Krakow", "Aarhus", "Valencia",
    "Graz", "Utrecht", "Cork", "Brno", "Malmo", "Seville", "Trieste", "Ljubljana",
)
JOBS = (
    "paramedic", "primary school teacher", "sound engineer", "pharmacist", "landscape architect",
    "bus driver", "data analyst", "pastry chef", "physiotherapist", "court interpreter", "carpenter",
    "veterinary nurse",
)
ORGS = (
    "Northwind Logistics", "the city library", "Greenfield Hospital", "Halden Studios", "Bright Harbour Bank",
    "Oakridge Primary", "Tidewater Labs", "the regional water board", "Lumen Games", "Ferro Engineering",
)
HOBBIES = (
    "bouldering", "pottery", "birdwatching", "salsa dancing", "woodturning", "open-water swimming",
    "chess puzzles", "urban sketching", "beekeeping", "trail running",
)
BREEDS = ("border collie", "dachshund", "greyhound", "beagle", "labrador", "whippet", "corgi")
PET_NAMES = ("Biscuit", "Pepper", "Juno", "Miso", "Olive", "Rusty", "Nutmeg", "Pixel", "Maple", "Bramble", "Ziggy")
ANIMALS = ("cat", "rabbit", "parrot", "tortoise", "hamster", "puppy")
ALLERGENS = ("hazelnuts", "shellfish", "penicillin", "sesame", "kiwi fruit", "mustard")
INSTRUMENTS = ("cello", "ukulele", "trumpet", "bass guitar", "accordion", "violin")
RACES = (
    "Harbour Half Marathon", "Riverside 10k", "Midnight Trail Run", "Lakeside Triathlon", "Hill Fort 15k",
    "Old Town Relay",
)
CARS = ("Skoda Octavia", "Toyota Yaris", "Volvo V70", "Fiat Panda", "Renault Zoe", "Honda Jazz", "Kia Niro")
BOOKS = (
    ("The Remains of the Day", "Kazuo Ishiguro"), ("A Gentleman in Moscow", "Amor Towles"),
    ("Project Hail Mary", "Andy Weir"), ("The Overstory", "Richard Powers"), ("Piranesi", "Susanna Clarke"),
    ("The Shadow of the Wind", "Carlos Ruiz Zafon"), ("Station Eleven", "Emily St. John Mandel"),
    ("Educated", "Tara Westover"),
)
LANGUAGES = ("Portuguese", "Japanese", "Dutch", "Greek", "Polish", "Korean")
DISHES = (
    "mushroom risotto", "chickpea and spinach curry", "roasted vegetable lasagne", "lentil shepherd's pie",
    "halloumi traybake", "sweet potato gnocchi",
)
PLACES = (
    "the botanical garden", "the old harbour market", "the castle ramparts", "the modern art museum",
    "the cathedral rooftop", "the covered food hall",
)
PLANTS = ("snake plant", "ZZ plant", "pothos", "cast iron plant", "peace lily")
STARTER_NAMES = ("Doughbi-Wan", "Clint Yeastwood", "Bread Pitt", "Sir Loafalot", "Rising Sun")
GIFTS = ("a pasta machine", "hiking poles", "a record player", "a good chef's knife", "noise-cancelling headphones")
BUSINESSES = ("bike repair shop", "bakery", "second-hand bookshop", "flower stall", "tailoring shop")
GYMS = ("Cliffhanger Climbing", "Blue Basin Pool", "Ironworks Gym", "Summit Wall", "Riverside Fitness")
CAFES = ("Kaffebar Nord", "The Copper Kettle", "Bean There", "Cafe Lumen", "Little Fox Coffee")
SPORTS = ("five-a-side football", "volleyball", "badminton", "ultimate frisbee", "water polo")
APPOINTMENTS = ("eye test", "dentist check-up", "driving test", "passport interview", "flu jab")
#: Things nobody in a generated history ever mentions: the abstention questions ask about them.
NEVER_SAID = (
    ("What is my {rel}'s favourite football team?", "football team"),
    ("Which hospital was my {rel} born in?", "hospital"),
    ("What is the name of my {rel}'s boat?", "boat"),
    ("What is my {rel}'s middle name?", "middle name"),
    ("What instrument does my {rel} play?", "instrument"),
    ("Where did my {rel} go to university?", "university"),
)

# -- topics: (name, openers, first answers, (follow-up, answer) pairs) -------------------------

TOPICS = (
    (
        "meal planning",
        ("I want to stop buying lunch every day. Can you help me plan a week of cheap lunches?",
         "I keep ending up with half a fridge of vegetables going off. Any way to plan meals better?"),
        ("Start with three planned lunches a week rather than five, and let the rest be leftovers.",
         "A soup and a grain salad cover most of the week and both keep for four days in the fridge."),
        (("What could I batch cook on Sunday that still tastes good on Thursday?",
          "Chilli, dal and roasted vegetables all taste better on the second and third day."),
         ("I only have about twenty minutes in the evening, is that realistic?",
          "Twenty minutes is enough if the slow parts, like roasting vegetables, happen on Sunday."),
         ("Can I freeze cooked rice safely?",
          "Cooked rice freezes fine if you cool it quickly and spread it thin before freezing."),
         ("How do I keep salads from going soggy in a lunch box?",
          "Keep the dressing in a separate small jar and add it just before you eat."),
         ("Should I make a shopping list by meal or by shop aisle?",
          "Listing by aisle saves time in the shop; listing by meal saves food at home. Many people do both."),
         ("Is it worth labelling things in the freezer?",
          "Yes: write the date on anything that goes into the freezer, it saves a lot of guessing later.")),
    ),
    (
        "sleep",
        ("I've been sleeping badly for a couple of weeks. Where would you even start?",
         "I wake up at four every night and can't get back to sleep. Is that normal?"),
        ("Keeping the same wake-up time every day, weekends included, is the single most useful habit.",
         "If you lie awake for more than twenty minutes, getting up and reading somewhere dim often helps."),
        (("Does it matter if I look at my phone in bed?",
          "The light matters less than the scrolling: it keeps your mind busy just when it should wind down."),
         ("I drink coffee until about three in the afternoon, too late?",
          "Caffeine has a half-life of around five hours, so a three o'clock coffee is still working at bedtime."),
         ("Would a nap after work make it worse?",
          "A short nap before three in the afternoon is usually fine; a long one in the evening is not."),
         ("My bedroom is quite warm, does temperature matter that much?",
          "Most people sleep better in a cool room, somewhere around seventeen to nineteen degrees."),
         ("Is it worth trying one of those sleep tracking apps?",
          "Trackers can be interesting, but some people sleep worse once they start watching the numbers."),
         ("What do I do when my head just keeps going over work stuff?",
          "Writing tomorrow's worries on paper before bed gives your head permission to let them go.")),
    ),
    (
        "a work presentation",
        ("I have to present our quarterly results to the whole department. I'm dreading it.",
         "Can you help me structure a fifteen-minute talk about a project that went over budget?"),
        ("Ending on the one decision you need from them makes the talk feel purposeful.",
         "Print a one-page summary; people relax when they know they will not miss anything."),
        (("How many slides is too many for fifteen minutes?",
          "Plan on roughly one slide per minute and let the important ones stay up longer."),
         ("Should I start with the bad news or build up to it?",
          "Leading with the headline, good or bad, usually earns more trust than a slow build-up."),
         ("What do I do if someone asks a question I can't answer?",
          "It is fine to say you will check and come back with the exact figure; then actually do it."),
         ("My manager wants lots of charts, but I find them hard to talk through.",
          "One chart per point, with the point written as the slide title, is easier to talk through."),
         ("How do I stop saying 'um' all the time?",
          "Pausing instead of filling the silence feels long to you but sounds confident to the room."),
         ("Is it worth rehearsing out loud, or is reading it through enough?",
          "Rehearsing out loud at least twice finds the sentences that look fine but are hard to say.")),
    ),
    (
        "a weekend away",
        ("We're thinking about a long weekend somewhere by train. How should we decide where?",
         "I want to plan a short trip for the bank holiday but don't want to spend all of it travelling."),
        ("For three days, keeping the travel under four hours each way leaves you two real days there.",
         "Looking at the walking routes before choosing the town can save a lot of disappointment."),
        (("Is it cheaper to book the train early or last minute?",
          "Advance train fares are usually much cheaper, but they tie you to a specific train."),
         ("We like walking but not serious hiking, does that narrow it down?",
          "Towns with a river or coastal path give you easy walks without any special gear."),
         ("Should we stay in one place or move around?",
          "Staying in one place and doing day trips means you unpack only once."),
         ("How much should we budget for food per day?",
          "A simple rule is to eat one nice meal out a day and keep the rest casual."),
         ("Is it worth getting travel insurance for a three-day trip?",
          "Insurance is worth checking if you have non-refundable bookings; some bank cards include it."),
         ("What should I pack if the forecast keeps changing?",
          "Layers and a light waterproof cover most weather better than one heavy coat.")),
    ),
    (
        "houseplants",
        ("Half my houseplants are looking sad. Where am I going wrong?",
         "I want more plants in my flat but I kill everything. Is there hope?"),
        ("Overwatering kills far more houseplants than forgetting to water them.",
         "Grouping plants together raises the humidity around them a little, which many enjoy."),
        (("How often should I actually water them?",
          "Push a finger into the soil; if the top two centimetres are dry, it is time to water."),
         ("The leaves on one of them keep going yellow, what does that mean?",
          "Yellow lower leaves often mean too much water or a pot without drainage."),
         ("Do they need feeding in winter?",
          "Most plants rest in winter, so they need less water and no feeding until spring."),
         ("Is tap water okay for them?",
          "Tap water is fine for nearly all common houseplants; let it stand a day if yours is very chalky."),
         ("Should I repot the one that has roots coming out of the bottom?",
          "Roots coming out of the bottom are a good sign it wants a pot one size bigger, ideally in spring."),
         ("Can I put them all on the same windowsill?",
          "A south-facing windowsill can scorch some plants in summer, so check what each one likes.")),
    ),
    (
        "running",
        ("I want to get back into running after a long break. How do I not get injured?",
         "My knees ache after runs lately. Should I be worried?"),
        ("Increasing your weekly distance by about ten percent at most gives your joints time to adapt.",
         "Aching that fades within a day is normal; pain that gets worse as you run is a reason to stop."),
        (("How many times a week is sensible at the start?",
          "Three short runs a week with rest days between them is a good way back in."),
         ("Do I really need proper running shoes?",
          "Shoes that suit your feet matter more than the brand; a running shop can watch you run."),
         ("Should I stretch before or after?",
          "A few minutes of brisk walking and leg swings warms you up better than static stretching."),
         ("Is it bad to run on an empty stomach in the morning?",
          "A short run on an empty stomach is fine for most people; longer runs go better with a snack."),
         ("How fast should my easy runs be?",
          "Easy runs should feel slow enough that you could hold a conversation."),
         ("What do I do on the days I really don't feel like going?",
          "On the hard days, promising yourself just ten minutes usually gets you out of the door.")),
    ),
    (
        "money",
        ("I want to actually save something each month this year. Where do I start?",
         "My bank account always seems empty by the twentieth. How do I work out where it goes?"),
        ("Tracking every expense for one month is dull but it tells you more than any budget template.",
         "Moving the savings on payday, before you can spend them, works better than saving what is left."),
        (("Is the fifty-thirty-twenty rule realistic?",
          "It is a useful starting shape, but rent alone eats more than half in many cities, so adjust it."),
         ("Should I pay off my credit card before saving?",
          "High-interest card debt usually costs more than savings earn, so clearing it first often makes sense."),
         ("How big should an emergency fund be?",
          "Three months of essential spending is a common target for an emergency fund."),
         ("Are those round-up savings apps worth it?",
          "Round-up apps help some people, but a fixed standing order does the same thing more reliably."),
         ("How do I stop impulse buying online?",
          "A waiting rule, like sleeping on any purchase over fifty, cuts a lot of impulse buying."),
         ("Is it worth switching energy supplier every year?",
          "Comparing energy tariffs once a year takes an hour and often pays for itself.")),
    ),
    (
        "cooking fish",
        ("I never cook fish at home because I'm scared of ruining it. Can you talk me through it?",
         "What's a simple fish dish to start with?"),
        ("Baking fish in a parcel with lemon and herbs is very forgiving for beginners.",
         "Thicker fillets are easier to get right than thin ones, which overcook quickly."),
        (("How do I know when it's cooked through?",
          "Fish is done when it turns opaque and flakes easily with a fork."),
         ("Should I buy fresh or frozen?",
          "Frozen fish is often frozen very fresh and is perfectly good for weeknight cooking."),
         ("Why does mine always stick to the pan?",
          "Sticking usually means the pan was not hot enough or the fish was moved too early."),
         ("How do I get crispy skin?",
          "A little oil in a hot pan, skin side down, and then leaving it alone gives crisp skin."),
         ("What goes well with it on a weeknight?",
          "New potatoes and something green are hard to beat next to a simple piece of fish."),
         ("How do I stop the whole flat smelling of fish?",
          "Opening a window and simmering a little lemon and water afterwards helps with the smell.")),
    ),
    (
        "a small garden",
        ("We finally have a small garden and I have no idea what to do with it.",
         "I'd like to grow some vegetables on the patio this year. Is it too late to start?"),
        ("Starting with a few things you really eat keeps it fun rather than a chore.",
         "A water butt is worth it if you have a drainpipe nearby."),
        (("What grows well in pots?",
          "Tomatoes, herbs, salad leaves and dwarf beans all do well in large pots."),
         ("The garden only gets sun in the afternoon, is that enough?",
          "Five or six hours of afternoon sun is enough for most vegetables."),
         ("How do I keep slugs off without chemicals?",
          "Beer traps and copper tape help, but going out with a torch after rain works best."),
         ("Should I make a compost heap?",
          "Even a small compost bin turns kitchen scraps into something useful within a year."),
         ("What can I plant now that will flower this summer?",
          "Cosmos and sunflowers sown now will still flower by late summer."),
         ("How often do pots need watering in summer?",
          "Pots can need water every day in hot weather, so a saucer underneath helps.")),
    ),
    (
        "a film night",
        ("We're doing a film night on Friday. Can you help me pick something everyone will like?",
         "I want to get into older films. Where would you start?"),
        ("A heist film is a safe bet for mixed tastes: tense but not frightening.",
         "Comedies from the fifties and sixties are a gentle way into older films."),
        (("Something not too long, maybe under two hours?",
          "Checking the running time first avoids the midnight yawns; plenty of good films are under ninety minutes."),
         ("One of us hates horror, the other hates musicals.",
          "Letting everyone veto one film keeps the peace better than voting."),
         ("Is it better to watch with subtitles or dubbed?",
          "Subtitles keep the actors' real voices; most people stop noticing them after ten minutes."),
         ("Any ideas for snacks that aren't just popcorn?",
          "Homemade nachos or a board of small snacks feel more special than popcorn."),
         ("How do I get my projector to work with my laptop?",
          "Most projectors take HDMI; a cheap adapter covers laptops with only USB-C."),
         ("What about a double bill with a theme?",
          "A theme like 'films set in one night' makes a double bill feel planned.")),
    ),
    (
        "a noisy neighbour",
        ("The flat above us has started playing loud music late at night. How do I handle it without a feud?",
         "How do I bring up a problem with a neighbour I barely know?"),
        ("Starting with 'you may not realise' gives them an easy way to fix it without losing face.",
         "A small gesture later, like a thank-you, makes the next conversation easier."),
        (("Should I leave a note or knock on the door?",
          "A friendly knock at a calm moment usually goes better than a note, which can read as cold."),
         ("What if they just ignore it?",
          "Keeping a short diary of dates and times helps if you need to take it further."),
         ("Is it worth talking to the other neighbours first?",
          "Asking other neighbours can show whether it is a shared problem, but avoid building a campaign."),
         ("When does it become something for the landlord?",
          "The landlord or building manager is the next step if a friendly chat changes nothing."),
         ("What do I actually say so it doesn't sound like an attack?",
          "Suggesting a specific time, like music off by eleven on weekdays, is easier to agree to."),
         ("Do earplugs really help with bass?",
          "Earplugs help with voices more than with bass, which travels through the building itself.")),
    ),
    (
        "a birthday party",
        ("I'm organising a surprise party for a friend. How do I keep it secret?",
         "I need ideas for a birthday party on a small budget."),
        ("A group chat without the birthday person, with one named organiser, keeps the secret safer.",
         "A loose theme, like a colour, adds fun without costumes nobody wants to wear."),
        (("How early should I send invitations?",
          "Two to three weeks' notice is usually right for a weekend party."),
         ("Is a themed party too much effort?",
          "Keep the theme to one detail, like the food or the music, and it stays easy."),
         ("What food works for about twenty people without cooking all day?",
          "A big pot of chilli or a build-your-own taco table feeds twenty people easily."),
         ("How do I get them to the venue without suspicion?",
          "Having a trusted friend take them out for a drink first is the classic cover story."),
         ("Do I need to plan games or will people just talk?",
          "One simple activity early on helps people who do not know each other start talking."),
         ("What's a good way to collect money for a group present?",
          "Online money pots make collecting for a present much less awkward.")),
    ),
)

# -- what the assistant says back to small news ----------------------------------------------

ACKNOWLEDGE = (
    "That's lovely to hear. How are you feeling about it?",
    "Oh, good to know! Thanks for telling me.",
    "That sounds like quite a change. How is everyone taking it?",
    "Nice! Let me know how it goes.",
    "That's exciting news. Is there anything you need to sort out for it?",
    "Good to know, I'll keep that in mind.",
)
ACKNOWLEDGE_PERSON = (
    "That's big news for {name}! How is {pron} finding it so far?",
    "Oh, how exciting for {name}. Say hello from me!",
    "{name} sounds busy! Are you going to visit?",
    "That's lovely. You must be proud of {name}.",
)
CLOSERS = (
    "Does that help?",
    "Want me to go into more detail on any of that?",
    "Tell me how it goes.",
    "",
    "",
)
#: What an assistant adds around the point of its answer, whatever the topic.
ELABORATIONS = (
    "It sounds like a small thing, but it makes a real difference over a few weeks.",
    "Most people find the first week the hardest, and after that it becomes routine.",
    "If it doesn't fit your week, drop it; the best plan is the one you actually follow.",
    "I'd try it for a fortnight before deciding whether it works for you.",
    "There's no single right way, so take what's useful and ignore the rest.",
    "Keep it simple at first; you can always add more once the basics feel easy.",
    "A lot depends on your own situation, so treat this as a starting point.",
    "Writing down what you try, even in a few words, helps you see what actually worked.",
    "You don't need anything expensive to start, just a bit of consistency.",
    "It's also fine to ask someone who has done it before; they'll know the local quirks.",
    "Small changes you keep beat big changes you abandon after a week.",
    "If something feels wrong or painful, that's a sign to slow down rather than push on.",
    "People often overthink this part, and the simple version works surprisingly well.",
    "Give yourself some credit for looking into it at all; most people never do.",
    "The details matter less than getting started and adjusting as you go.",
    "Check back in a couple of weeks and see how it feels then.",
)
NEW_TOPIC = ("Different question:", "Changing the subject,", "Something else:", "Totally unrelated, but")
ASIDE = ("By the way,", "Oh, and", "Unrelated, but", "Before I forget,", "Random update:", "Also,")
