"""The sentences ``dasllama bench quality`` speaks: plain prose, numbers, dates, money, names,
abbreviations, questions, and long sentences that cross the model's chunk limit's clause
rules. Fixed, so every run and every lane reads the same text."""

SENTENCES = (
    "The quick brown fox jumps over the lazy dog.",
    "Please call me back when you have a minute.",
    "The weather was cold and windy all morning.",
    "She opened the window and let the fresh air in.",
    "We will meet at the station at half past seven.",
    "Can you tell me where the nearest library is?",
    "He forgot his umbrella on the train again.",
    "The children played in the park until sunset.",
    "My grandmother bakes bread every Sunday morning.",
    "The museum is closed on Mondays and public holidays.",
    "The invoice came to $42.50, including tax.",
    "Our flight leaves at 6:45 in the morning.",
    "The meeting was moved to March 12, 2024.",
    "About 3,500 people attended the concert last night.",
    "The recipe needs 250 grams of flour and 2 eggs.",
    "She ran 5 kilometers in under 30 minutes.",
    "The temperature dropped to 12 degrees overnight.",
    "He was born in 1987 and moved to Chicago in 2010.",
    "The company earned 7 million dollars in the third quarter.",
    "Chapter 11 begins on page 304.",
    "Alexander and Beatrice visited Paris and Rome in the spring.",
    "Doctor Patel works at the hospital on Main Street.",
    "Maria Gonzalez won the election by a wide margin.",
    "Professor Nakamura teaches physics at the university.",
    "The Amazon is the largest rainforest on Earth.",
    "Mount Everest stands on the border of Nepal and China.",
    "William Shakespeare wrote Hamlet around the year 1600.",
    "The Pacific Ocean covers about a third of the planet.",
    "Is it true that you have never seen the ocean?",
    "What time does the last bus leave tonight?",
    "Turn left at the second traffic light, then go straight for two blocks.",
    "If it rains tomorrow, we will stay inside and watch a movie.",
    "The committee met to discuss the budget for next year, but no decision was made.",
    "After a long day at work, she made a cup of tea and read a book by the fire.",
    "The old lighthouse, which had guided ships for over a century, was finally restored "
    "by volunteers from the village.",
    "When the evening came, the travelers gathered around the fire; some told stories of "
    "distant lands, others simply listened, watching the sparks rise into the cold night "
    "air.",
    "The library opened at nine in the morning and closed at six in the evening, but on "
    "weekends it stayed open late so that students could study for their examinations "
    "without interruption.",
    "Scientists believe that the new telescope will help them understand how the first "
    "galaxies formed, and what the universe looked like only a few hundred million years "
    "after the big bang.",
    "Although the road was long and the weather was poor, the team arrived on time, set up "
    "their equipment, and began the performance exactly as planned, to the delight of the "
    "waiting crowd.",
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was "
    "the age of foolishness, it was the epoch of belief, it was the epoch of incredulity, it "
    "was the season of light, it was the season of darkness, it was the spring of hope, it "
    "was the winter of despair.",
)
